"""Lesson 10: the same kill -9 sweep on the frameworks learners use, and on their own.

- `contract`  what an adapter promises (`run`, `rebuild`, optional `instrument`) and the world
              the lab gives it (billed model, site, tracker; each call a crash point)
- `sweep`     point discovery from a traced clean run, one crash run per point (SIGKILL, resume,
              rebuild), the three witnesses, repeats; its records extend the lab's `Outcome`
              (`bughunt.experiment`: the same verdict, `summarize` and `frame`)
- `child`     one process of a sweep (forked from a pre-importing fork server)
- `langgraph_agent`, `dbos_agent`   the BugHunt agent on LangGraph and on DBOS Transact
- `fake`      a tiny fake framework, for the contract's tests
- `lab_worker`  the lab's own worker, run through the same contract

    python -m bughunt.frameworks --framework langgraph --mode sync --resume documented
"""

from .contract import ADAPTERS, Adapter, AdapterError, World, WorldSettings, final_state
from .sweep import (CleanRun, FrameworkRun, SweepSettings, sweep_framework, sweep_many,
                    sweep_timing, varying_points)

__all__ = ["ADAPTERS", "Adapter", "AdapterError", "World", "WorldSettings", "final_state",
           "CleanRun", "FrameworkRun", "SweepSettings", "sweep_framework", "sweep_many",
           "sweep_timing", "varying_points"]
