#!/usr/bin/env python3
"""Writes reference.tfevents: the events of events.json as TensorFlow itself writes them.

kbrl's TensorBoardWriter (libkbrl/src/log/tensorboard.cpp) must write these bytes exactly
(tests/unit/log_run_files_test.cpp compares them). The oracle is TensorFlow's C++ summary writer,
driven through its ops: WriteScalarSummary and WriteHistogramSummary (SummaryFileWriter's
WriteScalar and WriteHistogram: simple_value, and HistogramProto over TensorFlow's default
buckets), ImportEvent for the SessionLog START event, and tf.io.TFRecordWriter for the framing.
Only two things are changed afterwards, because they cannot be set through TensorFlow: every
wall time becomes the script's (TensorFlow stamps its clock), and the first event's writer name
becomes kbrl's (TensorFlow names itself there).

Needs tensorflow-cpu (not a kbrl dependency): a throwaway virtual environment does, e.g.
    python3 -m venv /tmp/tf && /tmp/tf/bin/pip install tensorflow-cpu==2.21.0
    /tmp/tf/bin/python tests/data/tensorboard/make_reference.py            # rewrite the file
    /tmp/tf/bin/python tests/data/tensorboard/make_reference.py --check    # compare with it
--check exits 77 (CTest's skip) when TensorFlow is not installed.
"""

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "events.json")
REFERENCE = os.path.join(HERE, "reference.tfevents")
KBRL_WRITER = "kbrl.log.tensorboard"  # TensorBoardWriter::kWriterName
SKIP = 77


def tensorflow_events(script, tf):
    """The script written by TensorFlow's C++ summary writer: serialized events, in order."""
    from tensorflow.core.util import event_pb2

    logdir = tempfile.mkdtemp(prefix="kbrl_tf_reference_")
    writer = tf.summary.create_file_writer(logdir)
    for ev in script["events"]:
        step = tf.constant(ev["step"], tf.int64)
        if ev["kind"] == "scalar":
            # float64 in, as kbrl's add_scalar(double): the writer narrows it to the float it stores.
            tf.raw_ops.WriteScalarSummary(writer=writer._resource, step=step, tag=ev["tag"],
                                          value=tf.constant(float(ev["value"]), tf.float64))
        elif ev["kind"] == "histogram":
            tf.raw_ops.WriteHistogramSummary(writer=writer._resource, step=step, tag=ev["tag"],
                                             values=tf.constant([float(v) for v in ev["values"]], tf.float64))
        elif ev["kind"] == "session_start":
            e = event_pb2.Event(step=ev["step"], wall_time=float(ev["wall_time"]),
                                session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START))
            tf.raw_ops.ImportEvent(writer=writer._resource, event=e.SerializeToString())
        else:
            raise ValueError("unknown event kind {!r}".format(ev["kind"]))
    writer.flush()
    writer.close()
    files = [f for f in os.listdir(logdir) if f.startswith("events.out.tfevents.")]
    if len(files) != 1:
        raise RuntimeError("expected one event file in {}, found {}".format(logdir, files))
    return [r.numpy() for r in tf.data.TFRecordDataset(os.path.join(logdir, files[0]))]


def reference_records(script, tf):
    from tensorflow.core.util import event_pb2

    raw = tensorflow_events(script, tf)
    if len(raw) != len(script["events"]) + 1:
        raise RuntimeError("TensorFlow wrote {} events for {} writes".format(len(raw), len(script["events"])))
    out = []
    for i, data in enumerate(raw):
        e = event_pb2.Event.FromString(data)
        # Re-encoding what TensorFlow's C++ protobuf wrote gives its bytes back: the edits below
        # change values only, never the encoding.
        if e.SerializeToString() != data:
            raise RuntimeError("event {}: Python's encoding differs from TensorFlow's".format(i))
        if i == 0:
            if e.file_version != "brain.Event:2":
                raise RuntimeError("first event: file_version {!r}".format(e.file_version))
            e.wall_time = float(script["start_time"])
            e.source_metadata.writer = KBRL_WRITER
        else:
            e.wall_time = float(script["events"][i - 1]["wall_time"])
        out.append(e.SerializeToString())
    return out


def framed(records, tf):
    path = os.path.join(tempfile.mkdtemp(prefix="kbrl_tf_reference_"), "reference.tfevents")
    with tf.io.TFRecordWriter(path) as w:
        for r in records:
            w.write(r)
    with open(path, "rb") as f:
        return f.read()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed file instead of writing it")
    args = ap.parse_args()
    try:
        import tensorflow as tf
    except ImportError:
        print("make_reference.py: TensorFlow is not installed: skipped", file=sys.stderr)
        return SKIP if args.check else 1
    with open(SCRIPT) as f:
        script = json.load(f)
    data = framed(reference_records(script, tf), tf)
    if args.check:
        with open(REFERENCE, "rb") as f:
            committed = f.read()
        if committed != data:
            print("reference.tfevents differs from what TensorFlow {} writes now".format(tf.__version__))
            return 1
        print("reference.tfevents is what TensorFlow {} writes ({} bytes)".format(tf.__version__, len(data)))
        return 0
    with open(REFERENCE, "wb") as f:
        f.write(data)
    print("wrote {} ({} bytes, TensorFlow {})".format(REFERENCE, len(data), tf.__version__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
