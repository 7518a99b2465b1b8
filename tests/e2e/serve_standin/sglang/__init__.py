"""Stand-in for SGLang in the serving end-to-end test (see ../standin.py)."""
