"""crashing_kernels: one tiny op and variants of it that crash, hang, run out of memory or
read out of bounds, to show what numcheck's process isolation makes of each (README.md)."""
