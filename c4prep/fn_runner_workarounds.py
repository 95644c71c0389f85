"""A workaround for Beam 2.77's FnApiRunner, the engine of the DirectRunner that c4prep runs in memory and with
``--direct_running_mode=multi_processing`` (`beam_runs.OfflineDirectRunner` applies it around each job).

**Stage inputs streamed to the workers.** Before each fused stage that reads a shuffle, the runner's driver encodes
the grouped input into one byte string per worker (`GroupingBuffer.partition`) and writes it to that worker's data
channel, which flushes only when told to (so that no element is cut in two). Each worker's whole input therefore
left as one message, about 100 MB of pages after the URL dedup of 100,500 pages, and the worker could start on none
of it before all of it had arrived. With 2 worker processes on 2 cores the driver worked alone for about 7 of the
run's 42 s, between stages. `partition_in_chunks` cuts each worker's part into chunks of whole elements of about
`CHUNK_BYTES`, and `send_input_in_messages` flushes the channel after each chunk once it holds more than the channel's
threshold (10 MB), so a worker starts on the first message while the driver sends the next. The elements, their
order and the worker each one goes to are unchanged. It stops the stream's timer first (`stop_periodic_flushes`).
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Iterable

from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.runners.portability.fn_api_runner import execution, fn_runner
from apache_beam.runners.worker import data_plane
from apache_beam.transforms.window import GlobalWindow, GlobalWindows
from apache_beam.utils.windowed_value import PaneInfo, PaneInfoTiming

from c4prep.patches import replaced

CHUNK_BYTES = 4 << 20  # a chunk of whole elements, below the data channel's flush threshold (10 MB)
_BEAM_PARTITION = execution.GroupingBuffer.partition
_ONLY_PANE = PaneInfo(is_first=True, is_last=True, timing=PaneInfoTiming.ON_TIME, index=0, nonspeculative_index=0)


def partition_in_chunks(buffer: execution.GroupingBuffer, parts: int) -> list[list[bytes]]:
    """Beam's `GroupingBuffer.partition` (key groups dealt to `parts` workers in turn), each worker's part as
    chunks of whole encoded groups of about `CHUNK_BYTES`. Windowing other than the global window: Beam's own."""
    if not buffer._windowing.is_default():
        return _BEAM_PARTITION(buffer, parts)
    if not buffer._grouped_output:
        in_global_window = GlobalWindows.windowed_value(None, timestamp=GlobalWindow().max_timestamp(),
                                                        pane_info=_ONLY_PANE).with_value
        group_coder, key_coder = buffer._post_grouped_coder.get_impl(), buffer._key_coder.get_impl()
        chunks: list[list[bytes]] = [[] for _ in range(parts)]
        streams = [create_OutputStream() for _ in range(parts)]
        for index, (encoded_key, values) in enumerate(buffer._table.items()):
            part = index % parts
            group_coder.encode_to_stream(in_global_window((key_coder.decode(encoded_key), values)), streams[part],
                                         True)
            if streams[part].size() >= CHUNK_BYTES:
                chunks[part].append(streams[part].get())
                streams[part] = create_OutputStream()
        for part, stream in enumerate(streams):
            chunks[part].append(stream.get())
        buffer._grouped_output = chunks
        buffer._table.clear()
    return buffer._grouped_output


def send_input_in_messages(manager: fn_runner.BundleManager, process_bundle_id: str, read_transform_id: str,
                           byte_streams: Iterable[bytes] | None) -> None:
    """Beam's `BundleManager._send_input_to_worker`, flushing after any byte string that takes the channel's
    buffer over its threshold. Every byte string a runner buffer holds is whole elements: a chunk of
    `partition_in_chunks`, or what a worker sent (workers flush between elements only)."""
    data_out = manager._worker_handler.data_conn.output_stream(process_bundle_id, read_transform_id)
    stop_periodic_flushes(data_out)
    for byte_stream in byte_streams or []:
        data_out.write(byte_stream)
        data_out.maybe_flush()
    data_out.close()


def stop_periodic_flushes(stream: data_plane.ClosableOutputStream) -> None:
    """The runner's gRPC data plane (``multi_processing``) gives each worker's input a stream that a timer thread
    flushes too, every second, and Beam's `write` does not take that flush's lock: bytes written while the timer
    sends what it read are cleared unsent. Beam writes a stage input at once and closes the stream, before the first
    tick; `send_input_in_messages` writes for longer and flushes between whole elements itself, so it stops the timer
    first. A 100,500-page run on 2 workers lost 2,543 pages at the URL shuffle (the integrity checks refused it) before
    the timer was stopped: this race is the cause found in the code, not one observed in the act."""
    if isinstance(stream, data_plane.TimeBasedBufferingClosableOutputStream):
        with stream._schedule_lock:  # held by the timer while it flushes
            stream._closed = True  # a tick already due sends nothing; `close` still sends the rest
            if stream._periodic_flusher is not None:
                stream._periodic_flusher.cancel()
                stream._periodic_flusher = None


def streaming_stage_inputs() -> AbstractContextManager[None]:
    """While the block runs, the FnApiRunner sends stage inputs in chunks (see the module docstring)."""
    return replaced((execution.GroupingBuffer, "partition", partition_in_chunks),
                    (fn_runner.BundleManager, "_send_input_to_worker", send_input_in_messages))
