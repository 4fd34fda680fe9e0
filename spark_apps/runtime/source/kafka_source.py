"""Baton's Kafka source for Spark Structured Streaming (format "baton-kafka").

Built on confluent-kafka (librdkafka) and the Spark 4 Python data source API, because the JVM
Kafka connector is not available and because owning the source is what makes fences possible
(see `capfile`).

    from spark_apps.runtime.source.kafka_source import KafkaSource
    spark.dataSource.register(KafkaSource)
    df = (spark.readStream.format("baton-kafka")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("topic", "clicks")
          .option("startingOffsets", "earliest")
          .load())

The parts: source_options (its options, listed there), source_plan (what a batch reads), kafka_stream_reader
(planning and the executors' reads, source_read), kafka_driver_reader (readOn=driver), source_columns
(the rows, as Arrow).
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from spark_apps.runtime.source.kafka_driver_reader import DriverStreamReader
from spark_apps.runtime.source.kafka_stream_reader import KafkaStreamReader
from spark_apps.runtime.source.source_columns import output_schema
from spark_apps.runtime.source.source_options import SourceOptions, parse_options

FORMAT = "baton-kafka"


class KafkaSource(DataSource):
    """Register with `spark.dataSource.register(KafkaSource)`; use format "baton-kafka"."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return output_schema(parse_options(self.options))

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        opts = self._checked(schema)
        if opts.read_on == "driver":  # Spark then asks for simpleStreamReader
            from pyspark.errors import PySparkNotImplementedError

            raise PySparkNotImplementedError(
                errorClass="NOT_IMPLEMENTED", messageParameters={"feature": "streamReader"}
            )
        return KafkaStreamReader(opts)

    def simpleStreamReader(self, schema: StructType) -> DriverStreamReader:
        return DriverStreamReader(self._checked(schema))

    def _checked(self, schema: StructType) -> SourceOptions:
        opts = parse_options(self.options)
        expected = output_schema(opts)
        if [(f.name, f.dataType) for f in schema.fields] != [(f.name, f.dataType) for f in expected.fields]:
            raise ValueError(
                f"{FORMAT} has the schema its options give ({expected.simpleString()}); got {schema.simpleString()}"
            )
        return opts
