"""liger_mhc: liger-kernel's mHC forward kernels gated by numcheck (a worked example)."""
