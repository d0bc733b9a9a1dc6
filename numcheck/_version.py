"""numcheck's version, defined once: the package exports it (``numcheck.__version__``), and
reports and their environment record it. A module of its own so that those inside the
package read it without importing the package's public facade (``numcheck/__init__.py``),
which names every room for type checkers."""

from __future__ import annotations

__version__ = "0.1.0"
