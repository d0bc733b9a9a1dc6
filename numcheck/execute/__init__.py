"""Where a run executes its checks: the executor a run calls (a request in, a result out),
in this process or in a worker process that a crash, a hang or running out of memory ends
alone (docs/architecture.md, "Where a check is executed"); what the checks of a case share."""
