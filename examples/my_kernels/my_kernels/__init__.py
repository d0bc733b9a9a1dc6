"""my_kernels: a stand-in for your serving stack's own kernels (numcheck's worked example)."""
