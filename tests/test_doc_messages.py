"""The guides' example messages are what numcheck prints for the shipped case files.

tests/doc_messages.py renders each block a guide marks (``<!-- numcheck message: NAME -->``
before its fence) from the shipped case files through the failure message the gate prints;
after a change on purpose, ``python -m tests.doc_messages --write`` rewrites the blocks.
"""

from __future__ import annotations

from tests.doc_messages import GUIDES, MESSAGES, blocks, differences, rendered  # tests/doc_messages.py


def test_every_marked_block_is_what_numcheck_prints() -> None:
    diff = differences()
    assert not diff, ("the guides' messages differ from what numcheck prints (if on "
                      "purpose: python -m tests.doc_messages --write):\n" + "\n".join(diff))


def test_every_message_is_quoted_and_the_comparison_sees_a_stale_line() -> None:
    """Each message is in a guide; a block holding the docs' old line for mHC's tf32 y
    (``cases/mhc.toml:112``, which is max_outside_rows' line) fails the comparison, and the
    rewrite puts back what numcheck prints."""
    quoted = {name for guide in GUIDES for name, _ in blocks(guide.read_text())}
    assert quoted == set(MESSAGES)
    now = MESSAGES["mhc-tf32-y"]()
    assert now.startswith("  budget:      cases/mhc.toml:") and ":112 " not in now
    stale = now.replace(now.split()[1], "cases/mhc.toml:112", 1)
    text = f"A miss:\n\n<!-- numcheck message: mhc-tf32-y -->\n```\n{stale}\n```\n"
    assert blocks(text) == [("mhc-tf32-y", stale + "\n")] != [("mhc-tf32-y", now + "\n")]
    assert blocks(rendered(text)) == [("mhc-tf32-y", now + "\n")]
