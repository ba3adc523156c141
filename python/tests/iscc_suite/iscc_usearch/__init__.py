"""Test-only ``iscc_usearch`` that hands on the names of
:mod:`sagitta.compat.iscc`, so that iscc-usearch's own test suite
(``../shared/iscc-usearch-tests``) runs unmodified against Sagitta.
Nothing here is part of the package a user installs."""

from sagitta.compat.iscc import *  # noqa: F403
from sagitta.compat.iscc import __all__  # noqa: F401


class NphdIndex:
    """iscc-usearch's in-memory ``NphdIndex`` is not part of the drop-in
    (its suite's conftest imports the name for a fixture no sharded test
    uses); constructing it says so."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise NotImplementedError(
            "sagitta.compat.iscc has the sharded classes only; use ShardedNphdIndex"
        )
