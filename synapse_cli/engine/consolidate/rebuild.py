"""`consolidate --rebuild`: drop the graph consolidation built, so that the run builds it again
from every live episode: with another model, or after a change to what a node holds (nodes
made before they carried their users' tags, FORMAT.md 13.3). The extraction cache stays: with
the same model a rebuild re-reads no window through it."""
from __future__ import annotations

import numpy as np

from store_format import flags as fl

from ..maintenance.prune import Table, compact, set_bit, trash
from ..store import StoreWriter
from .dormancy import DormancyState


def drop_graph(w: StoreWriter) -> int:
    """Forget the dormancy state (its nodes go, and its record of the last window would make
    the run redo that window whole, as after a crash: FORMAT.md 16), queue every episode for
    consolidation again (its consolidated flag cleared, in the trash too), then compact every
    semantic node away, live or in the trash, pinned or not, with its edges; what a user put
    in the trash stays there, restorable. Each step is its own commit, in this order, and the
    whole can be run again: a rebuild killed half way is finished by the next one. Returns the
    nodes dropped."""
    state = DormancyState.load(w)
    if state.last_window or len(state.ids):
        DormancyState(windows=state.windows).stage(w)
        w.commit()
        w.refresh()
    t = Table.of(w)
    gone = fl.is_tombstone(t.flags)
    node = fl.memory_type_code(t.flags) == fl.MemoryType.SEMANTIC
    # the trashed ones too: one restored later has no node left and must be consolidated again
    set_bit(w, t.ids[~node & fl.is_consolidated(t.flags)], fl.CONSOLIDATED, False)
    trash(w, t.ids[~gone & node])
    if node.any():
        compact(w, keep=set(t.ids[gone & ~node].tolist()))
    return int(np.count_nonzero(node))
