"""Model synchronisation for local-SGD-style training (full and incremental,
compressed, synchronous or one round late): see fastcomm.sync.ModelSync and
docs/model_sync.md.

    sync = fastcomm.sync.ModelSync(model, period=8)                      # local SGD
    sync = fastcomm.sync.ModelSync(model, period=8, mode="incremental", compression="int8",
                                   outer_optimizer=lambda ps: torch.optim.SGD(ps, lr=0.7, momentum=0.9, nesterov=True))
    for batch in data:
        loss(model(batch)).backward(); opt.step(); opt.zero_grad()
        sync.step()
    sync.finish()
"""

from fastcomm.sync.codecs import COMPRESSIONS
from fastcomm.sync.model_sync import MODES, ModelSync

__all__ = ["COMPRESSIONS", "MODES", "ModelSync"]
