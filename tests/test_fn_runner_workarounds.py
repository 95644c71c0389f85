"""The FnApiRunner's stage inputs in chunks (`c4prep.fn_runner_workarounds`): the same groups, in the same order, for
the same worker, as Beam's own partition, and sent as several messages of whole elements."""
import threading
import time
from types import SimpleNamespace

import pytest
from apache_beam import coders
from apache_beam.coders.coder_impl import create_InputStream, create_OutputStream
from apache_beam.runners.portability.fn_api_runner.execution import GroupingBuffer
from apache_beam.runners.worker.data_plane import _DEFAULT_SIZE_FLUSH_THRESHOLD, ClosableOutputStream
from apache_beam.transforms import core
from apache_beam.transforms.window import GlobalWindows

from c4prep.fn_runner_workarounds import _BEAM_PARTITION, CHUNK_BYTES, partition_in_chunks, send_input_in_messages

PRE_GROUPED = coders.WindowedValueCoder(coders.TupleCoder([coders.BytesCoder(), coders.PickleCoder()]))
POST_GROUPED = coders.WindowedValueCoder(
    coders.TupleCoder([coders.BytesCoder(), coders.IterableCoder(coders.PickleCoder())]))


def _filled_buffer(pages: int) -> GroupingBuffer:
    """A grouping buffer holding `pages` page-sized values under a third as many keys, as a worker's output fills it."""
    buffer = GroupingBuffer(PRE_GROUPED, POST_GROUPED, core.Windowing(GlobalWindows()))
    stream = create_OutputStream()
    for index in range(pages):
        value = (f"page {index} " + "text of a page, " * (index % 400)).encode()
        PRE_GROUPED.get_impl().encode_to_stream(
            GlobalWindows.windowed_value((f"url-{index % (pages // 3)}".encode(), value)), stream, True)
    buffer.append(stream.get())
    return buffer


def _groups(encoded: bytes) -> list:
    stream, groups = create_InputStream(encoded), []
    while stream.size() > 0:
        key, values = POST_GROUPED.get_impl().decode_from_stream(stream, True).value
        groups.append((key, list(values)))
    return groups


@pytest.mark.parametrize("parts", [1, 2, 3])
def test_chunked_parts_hold_beams_groups_in_beams_order(parts):
    ours, theirs = partition_in_chunks(_filled_buffer(12_000), parts), _BEAM_PARTITION(_filled_buffer(12_000), parts)
    assert [b"".join(chunks) for chunks in ours] == [b"".join(chunks) for chunks in theirs]
    for chunks in ours:
        assert len(chunks) > 1 and all(len(chunk) >= CHUNK_BYTES for chunk in chunks[:-1])
        assert [group for chunk in chunks for group in _groups(chunk)] == _groups(b"".join(chunks))  # whole groups


def test_an_empty_buffer_gives_each_part_one_empty_chunk():
    empty = GroupingBuffer(PRE_GROUPED, POST_GROUPED, core.Windowing(GlobalWindows()))
    assert partition_in_chunks(empty, 2) == [[b""], [b""]]


def test_a_workers_input_leaves_in_several_messages_of_whole_chunks():
    chunks = partition_in_chunks(_filled_buffer(12_000), 1)[0]
    messages = []

    def output_stream(process_bundle_id, read_transform_id):
        assert (process_bundle_id, read_transform_id) == ("bundle_1", "read")
        return ClosableOutputStream.create(messages.append, messages.append, 0)

    manager = SimpleNamespace(_worker_handler=SimpleNamespace(data_conn=SimpleNamespace(output_stream=output_stream)))
    send_input_in_messages(manager, "bundle_1", "read", chunks)
    assert b"".join(messages) == b"".join(chunks) and len(messages) > 1
    assert all(len(message) > _DEFAULT_SIZE_FLUSH_THRESHOLD for message in messages[:-1])
    assert [group for message in messages for group in _groups(message)] == _groups(b"".join(chunks))


def test_the_runners_timer_does_not_flush_while_the_chunks_are_written():
    """The runner's gRPC data plane buffers a worker's input in a stream that a timer thread also flushes (every
    second there; every millisecond here), and Beam's `write` does not take that flush's lock: a chunk written while
    the timer sends would be cleared unsent. The sender stops the timer and flushes between whole chunks itself."""
    senders, messages = [], []

    def send(data):
        senders.append(threading.current_thread())
        messages.append(data)

    def output_stream(process_bundle_id, read_transform_id):
        return ClosableOutputStream.create(send, send, 1)

    def slow_chunks():  # the timer would tick several times between two chunks
        for index in range(20):
            time.sleep(0.005)
            yield bytes([index]) * 1_000

    manager = SimpleNamespace(_worker_handler=SimpleNamespace(data_conn=SimpleNamespace(output_stream=output_stream)))
    send_input_in_messages(manager, "bundle_1", "read", slow_chunks())
    assert b"".join(messages) == b"".join(bytes([index]) * 1_000 for index in range(20))
    assert set(senders) == {threading.main_thread()}
