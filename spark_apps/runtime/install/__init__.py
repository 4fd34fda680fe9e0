"""Preparing the installed environment a slot's driver starts from (run by `make install` and the
images): the Spark home, the workers' pyspark path, the JVM's class-data-sharing archive."""
