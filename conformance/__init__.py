"""The conformance suite: op x dtype x mode matrix for a backend."""
