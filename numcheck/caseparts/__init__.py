"""Parts of a case file beyond its budgets: shape sweeps (``sweep``) and what a case's inputs
are (``inputs``: a named distribution, or a file of recorded inputs).

Parsed here as plain data, below :mod:`numcheck.cases`, which calls them while it reads a
case and wraps their problems in a :class:`~numcheck.cases.CaseFileError` naming the file,
the case, the key and the fix. Nothing here imports pytest.
"""
