"""A micro-batch crosses from a loader worker as one buffer: unpacked, the same tensors; through the loader, the
same batches as the stream, each batch's tensors views of one buffer."""
import pytest
import torch

from c4prep.training.data.batches import make_loader
from c4prep.training.data.packed_batches import ALIGNMENT, PackedBatch, PackedStream


def _batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {"tokens": torch.randint(0, 300, (3, 7), generator=generator),
            "weights": torch.rand(3, 7, generator=generator),
            "mask": torch.rand(3, 1, 7, 7, generator=generator) > 0.5,
            "half": torch.rand(5, generator=generator).to(torch.bfloat16),
            "ids": torch.arange(6, dtype=torch.int32).reshape(2, 3).t(),  # not contiguous
            "empty": torch.zeros(0, 4),
            "scalar": torch.tensor(2.5, dtype=torch.float64)}


def test_unpacked_tensors_equal_the_packed_ones():
    batch = _batch()
    packed = PackedBatch.of(batch)
    unpacked = packed.unpack()
    assert list(unpacked) == list(batch)
    for name, tensor in batch.items():
        assert (unpacked[name].dtype, unpacked[name].shape) == (tensor.dtype, tensor.shape), name
        assert torch.equal(unpacked[name], tensor), name
    assert packed.buffer.dtype == torch.uint8 and packed.buffer.dim() == 1
    base = packed.buffer.data_ptr()
    assert all((view.data_ptr() - base) % ALIGNMENT == 0 for view in unpacked.values() if view.numel())


class WorkerStream(torch.utils.data.IterableDataset):
    """Micro-batch ``j`` built by worker ``j % workers``, as ``MicroBatchStream`` splits them."""

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        for j in range(worker, 6, workers):
            yield {"tokens": torch.full((2, 3), j), "weights": torch.full((2, 3), j / 2)}


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_yields_the_streams_batches_each_in_one_buffer(workers):
    received = list(make_loader(WorkerStream(), workers))
    assert [{k: v.tolist() for k, v in b.items()} for b in received] == \
        [{k: v.tolist() for k, v in b.items()} for b in WorkerStream()]
    for batch in received:
        assert len({t.untyped_storage().data_ptr() for t in batch.values()}) == 1
    assert all(isinstance(item, PackedBatch) for item in PackedStream(WorkerStream()))
