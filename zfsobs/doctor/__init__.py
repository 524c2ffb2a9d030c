"""`zfsobs doctor`: the checks of what this machine can trace (report.py runs them)."""
