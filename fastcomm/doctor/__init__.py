"""fastcomm's diagnostics: ``python -m fastcomm.doctor`` (fastcomm/doctor/cli.py; docs/doctor.md)."""
