#!/usr/bin/env python3
"""kbrl's TensorBoard event files against TensorBoard's own writer and reader (the `tensorboard`
pip package, no TensorFlow). Called by tests/unit/log_run_files_test.cpp.

  compare EVENT_FILE SCRIPT REFERENCE
      EVENT_FILE was written by kbrl's TensorBoardWriter from SCRIPT (tests/data/tensorboard/
      events.json). Checks: its name is the one tensorboard.summary.writer.event_file_writer gives
      at the script's start time; every record passes TensorBoard's record reader (lengths and
      masked CRC-32Cs); and its bytes are what EventFileWriter writes for the same events, with
      its clock set to the script's times: scalars as Summary.Value.simple_value, SessionLog START
      events, histograms (whose bucketing the pip package does not have) taken from REFERENCE,
      the file TensorFlow wrote. The first event differs in one field only, the writer's name.

  purge LOGDIR TAG
      Prints {step: [values]} for TAG as TensorBoard's EventAccumulator reads LOGDIR with
      purge_orphaned_data (its default), so a test can see a resumed run's redone steps once.
"""

import json
import os
import re
import socket
import struct
import sys
import tempfile
import time
import unittest.mock


def records(path):
    """The file's records through TensorBoard's own reader, which checks every CRC."""
    from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow

    reader = pywrap_tensorflow.PyRecordReader_New(path.encode(), 0, b"", None)
    out = []
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return out
        out.append(reader.record())


def tensorboard_writes(script, histograms):
    """The script's events written by TensorBoard's EventFileWriter, the clock at the script's
    times. Returns (file name, bytes)."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    logdir = tempfile.mkdtemp(prefix="kbrl_tb_check_")
    with unittest.mock.patch.object(time, "time", return_value=float(script["start_time"])):
        writer = EventFileWriter(logdir)
    for ev in script["events"]:
        e = event_pb2.Event(wall_time=float(ev["wall_time"]), step=ev["step"])
        if ev["kind"] == "scalar":
            e.summary.value.add(tag=ev["tag"], simple_value=float(ev["value"]))
        elif ev["kind"] == "histogram":
            e.summary.CopyFrom(summary_pb2.Summary.FromString(histograms.pop(0)))
        elif ev["kind"] == "session_start":
            e.session_log.status = event_pb2.SessionLog.START
        else:
            raise ValueError("unknown event kind {!r}".format(ev["kind"]))
        writer.add_event(e)
    writer.close()
    (name,) = os.listdir(logdir)
    with open(os.path.join(logdir, name), "rb") as f:
        return name, f.read()


def compare(event_file, script_path, reference_path):
    from tensorboard.compat.proto import event_pb2

    with open(script_path) as f:
        script = json.load(f)
    failures = []

    # The name: EventFileWriter's "events.out.tfevents.%010d.%s.%s.%s" % (time, host, pid, uid).
    name = os.path.basename(event_file)
    prefix = "events.out.tfevents.%010d.%s." % (float(script["start_time"]), socket.gethostname())
    if not (name.startswith(prefix) and re.fullmatch(r"\d+\.\d+", name[len(prefix):])):
        failures.append("file name {!r} is not {}<pid>.<n>".format(name, prefix))

    ours = records(event_file)
    histograms = []
    for r in records(reference_path)[1:]:
        e = event_pb2.Event.FromString(r)
        if e.summary.value and e.summary.value[0].HasField("histo"):
            histograms.append(e.summary.SerializeToString())
    tb_name, tb_bytes = tensorboard_writes(script, histograms)
    if not tb_name.startswith(prefix):
        failures.append("TensorBoard's writer named its file {!r}, not {}...".format(tb_name, prefix))
    with tempfile.NamedTemporaryFile(suffix=".tfevents") as tmp:
        tmp.write(tb_bytes)
        tmp.flush()
        theirs = records(tmp.name)
    if len(ours) != len(theirs):
        failures.append("{} records, TensorBoard's writer wrote {}".format(len(ours), len(theirs)))
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if i == 0:
            first = event_pb2.Event.FromString(b)
            first.source_metadata.writer = event_pb2.Event.FromString(a).source_metadata.writer
            b = first.SerializeToString()
        if a != b:
            failures.append("record {}: {} bytes {}, TensorBoard's {} bytes {}\n  ours:   {}\n  theirs: {}".format(
                i, len(a), a.hex(), len(b), b.hex(), event_pb2.Event.FromString(a), event_pb2.Event.FromString(b)))
    # The framing too: everything after the first record is the same bytes in the same order.
    with open(event_file, "rb") as f:
        whole = f.read()
    first_len = 16 + struct.unpack("<Q", whole[:8])[0]
    tb_first_len = 16 + struct.unpack("<Q", tb_bytes[:8])[0]
    if whole[first_len:] != tb_bytes[tb_first_len:]:
        failures.append("the framed records after the first differ from TensorBoard's writer's")
    for f in failures:
        print("FAIL:", f)
    if not failures:
        print("{} records, the same bytes as TensorBoard's EventFileWriter".format(len(ours)))
    return 1 if failures else 0


def purge(logdir, tag):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(logdir, size_guidance={"scalars": 0}, purge_orphaned_data=True)
    acc.Reload()
    steps = {}
    for e in acc.Scalars(tag):
        steps.setdefault(str(e.step), []).append(e.value)
    print(json.dumps(steps, sort_keys=True))
    return 0


def main(argv):
    if len(argv) == 5 and argv[1] == "compare":
        return compare(argv[2], argv[3], argv[4])
    if len(argv) == 4 and argv[1] == "purge":
        return purge(argv[2], argv[3])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
