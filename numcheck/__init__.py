"""numcheck: is the faster op still right? Precision validation against FP32 goldens.

Run ``pytest --numcheck``; see README.md. The pure modules (``metrics``, ``topk``,
``cases``, ``goldens``, ``runner``) work without pytest.
"""

__version__ = "0.1.0"
