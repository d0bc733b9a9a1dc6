"""What numcheck's own machinery costs: the envelope, the ledger, history, calibration."""
