"""bench/profiling.with_launch_recording: a profiled slot's JVM starts with a flight recording, ahead of
any JVM options the run was given, and every other setting passes through."""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("profiling", Path(__file__).parents[3] / "bench" / "profiling.py")
profiling = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(profiling)


def test_the_launch_recording_is_the_driver_jvm_s_only_option_when_none_is_given():
    conf = profiling.with_launch_recording(["spark.sql.shuffle.partitions=1"])
    assert conf == ["spark.sql.shuffle.partitions=1", f"spark.driver.extraJavaOptions={profiling.LAUNCH_RECORDING}"]
    assert profiling.LAUNCH_RECORDING.startswith("-XX:StartFlightRecording=settings=profile,")


def test_given_jvm_options_come_after_the_launch_recording_so_they_win():
    conf = profiling.with_launch_recording(
        ["spark.driver.extraJavaOptions=-XX:CompileThresholdScaling=4 -Da=b=c", "spark.executor.extraJavaOptions=-Dx=1"]
    )
    assert conf == [
        "spark.executor.extraJavaOptions=-Dx=1",
        f"spark.driver.extraJavaOptions={profiling.LAUNCH_RECORDING} -XX:CompileThresholdScaling=4 -Da=b=c",
    ]
