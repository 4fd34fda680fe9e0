"""Baton's Kafka source: planning, reading and decoding each batch's input (format "baton-kafka")."""
