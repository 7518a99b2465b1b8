"""Stand-in for sglang-router in the serving end-to-end test (see ../standin.py)."""
