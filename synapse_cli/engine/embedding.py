"""Which embedding model a command uses: one rule for every command and the API.

`--embedder DIR` (ingest, import), else the `embedding.embed_model_dir` setting (config file or
$SYNAPSE_EMBED_MODEL_DIR), else the packaged all-MiniLM-L6-v2. A store records its model's name
and dimension, not where the model lives (a path would not survive a move to another machine),
so a store created with another model needs the setting, and `check` refuses the wrong one.
"""
from __future__ import annotations

from . import config
from .errors import ConfigError


def embedder(model_dir=None):
    from ..models.embedder import get_embedder

    if model_dir is None:
        s = config.resolve()
        name = "embedding.embed_model_dir"
        model_dir = s[name]
        if model_dir is not None:
            try:
                return get_embedder(model_dir=model_dir)
            except FileNotFoundError as exc:  # the user's setting names the wrong directory
                where = f"${config.BY_NAME[name].env}" if s.sources[name] == "env" else \
                    f"{s.file}: {name}"
                raise ConfigError(f"{where}: {exc}",
                                  hint="a sentence-transformers model directory") from None
    return get_embedder(model_dir=model_dir)


def check(store, embedder) -> None:
    """Refuse to mix models: the store's vectors and the query's must come from one model."""
    from ..models.embedder import same_model

    m = store.manifest
    if m.dim != embedder.dim or not same_model(m.embedder, embedder.name):
        raise ConfigError(f"store {store.path} was built with {m.embedder} (dim {m.dim}), "
                          f"not {embedder.name} (dim {embedder.dim})",
                          hint="point embedding.embed_model_dir (or $SYNAPSE_EMBED_MODEL_DIR) at "
                               "the model the store was created with, or use a new store",
                          usage=True)
