"""The query's output: the role-gated sink, exactly-once Kafka writes, dead letters, corrected output."""
