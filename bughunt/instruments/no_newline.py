"""The no-newline trap (lesson 5) as an instrument: the lab's event-log store without its newline
repair.

The source text's log appended after a torn write without first ending the fragment it left: the
next record is glued onto the fragment, and both are lost as one line that does not parse. The
resumed run is right (its memory has the record), the log on disk is not, and only the next
recovery, or a fresh rebuild from disk, finds out. The lab's store repairs the tail
(`bughunt.stores.log.ensure_newline_terminated`); this subclass is the same store with that one
step left out, so the store a learner reads carries no switch for the bug.

The configuration chooses it from outside: write mode `no-newline` on the log store runs this
class (`bughunt.stores.store_for`); its writes are torn at a mid-commit crash, as in `torn` mode.
"""

from __future__ import annotations

from ..stores.log import LogStore


class NoNewlineLogStore(LogStore):
    """`LogStore` whose `open_for_append` leaves the log's tail as the crash left it."""

    def repair_tail(self) -> bool:
        return False
