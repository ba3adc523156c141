"""Drop-in surfaces of other libraries, over :class:`sagitta.Collection`.

- :mod:`sagitta.compat.iscc`: iscc-usearch's ``ShardedIndex`` family.
"""
