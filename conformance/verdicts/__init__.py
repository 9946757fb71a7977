"""What a case's result means: value comparison (compare.py), the statuses (status.py), the
backend's expected failures (manifest.py) and the governed CPU fallback's legality (fallback.py)."""
