"""`c4prep.patches.replaced`: the one way the engine workarounds swap library attributes in and out."""
import types

import pytest

from c4prep.patches import replaced


class Base:
    def greet(self):
        return "base"


class Child(Base):
    pass


def test_attributes_are_replaced_inside_the_block_and_restored_after_it():
    module = types.SimpleNamespace(partition="dask's", send="beam's")
    with replaced((module, "partition", "ours"), (module, "send", "ours too")):
        assert (module.partition, module.send) == ("ours", "ours too")
    assert (module.partition, module.send) == ("dask's", "beam's")


def test_an_error_in_the_block_still_restores_them():
    module = types.SimpleNamespace(partition="dask's")
    with pytest.raises(RuntimeError, match="job failed"):
        with replaced((module, "partition", "ours")):
            raise RuntimeError("job failed")
    assert module.partition == "dask's"


def test_an_inherited_method_is_inherited_again_after_the_block():
    with replaced((Child, "greet", lambda self: "child")):
        assert Child().greet() == "child"
        assert Base().greet() == "base"
    assert "greet" not in vars(Child)
    assert Child().greet() == "base"


def test_nested_blocks_restore_what_each_found():
    module = types.SimpleNamespace(partition="dask's")
    with replaced((module, "partition", "outer")):
        with replaced((module, "partition", "inner")):
            assert module.partition == "inner"
        assert module.partition == "outer"
    assert module.partition == "dask's"
