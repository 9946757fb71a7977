"""The dispatcher: kernel registry, routing by device key, governed fallback, coverage, trace."""
