"""The lab's instruments, kept outside the code they observe (as SQLite keeps its test VFSes
outside its pager): they plug in under the I/O door, or patch a temporary copy of the source.

- `journal`  every disk operation the door makes, with its bytes (for the power-loss simulation
             and the conformance suite);
- `faults`   a disk that fills up at the k-th write, an fsync that fails at the k-th call;
- `mutants`  the planted bugs of lesson 8, each a named one-line patch to a copy of the real
             source: the production modules contain no bug names;
- `no_newline`  the lesson 5 trap: the event-log store without its newline repair, the store
             that write mode `no-newline` runs.
"""
