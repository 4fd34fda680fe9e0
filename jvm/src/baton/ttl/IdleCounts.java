package baton.ttl;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;

import org.apache.spark.api.java.function.FlatMapGroupsWithStateFunction;
import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.GroupState;
import org.apache.spark.sql.streaming.GroupStateTimeout;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * A running count per key whose state ends when the key has been idle for {@code idleMs} of event time.
 *
 * <p>Which events a key's count includes is decided by event times alone, never by when the state is
 * dropped: an event more than {@code idleMs} after the key's last one starts the count afresh. So two
 * slots that cut the same input into different batches, a reprocess, and a restart all count the same,
 * provided a key's events arrive in event-time order (one producer per key, as Kafka's partitioning by
 * key gives; a batch's events of a key are put in order first). Dropping the state is only garbage
 * collection: an event-time timeout at the key's last event + idleMs, which Spark fires once the
 * watermark passes it, in the first batch with data after that (the watermark moves at batch
 * boundaries, so slots drop at different input positions; their digests compare the keys alive at one
 * position: see spark_apps.apps.click_counts_ttl.live_state).
 *
 * <p>In: the key (string) and the event time (timestamp, with a watermark). Out, in update mode: the key,
 * its count, and its last event time (ms). The state: {@link Life}.
 */
public final class IdleCounts {
    private IdleCounts() {
    }

    /** The state of a key: its count since its life began, and its latest event time (ms). */
    public static final class Life implements Serializable {
        private long count;
        private long lastMs;

        public Life() {
        }

        public long getCount() {
            return count;
        }

        public void setCount(long count) {
            this.count = count;
        }

        public long getLastMs() {
            return lastMs;
        }

        public void setLastMs(long lastMs) {
            this.lastMs = lastMs;
        }
    }

    public static final StructType OUTPUT = new StructType()
            .add("key", DataTypes.StringType, false)
            .add("count", DataTypes.LongType, false)
            .add("last_ms", DataTypes.LongType, false);

    /** Called from PySpark through py4j: {@code events} holds {@code keyCol} and {@code timeCol} (watermarked). */
    public static Dataset<Row> apply(Dataset<Row> events, String keyCol, String timeCol, long idleMs) {
        // The time as epoch ms beside the watermarked column itself (kept: the timeout needs the watermark).
        Dataset<Row> pairs = events.selectExpr("CAST(" + keyCol + " AS STRING) AS key",
                "unix_millis(" + timeCol + ") AS t_ms", timeCol + " AS t");
        return pairs
                .groupByKey((MapFunction<Row, String>) r -> r.getString(0), Encoders.STRING())
                .flatMapGroupsWithState(new Step(idleMs), OutputMode.Update(), Encoders.bean(Life.class),
                        Encoders.row(OUTPUT), GroupStateTimeout.EventTimeTimeout());
    }

    static final class Step implements FlatMapGroupsWithStateFunction<String, Row, Life, Row> {
        private final long idleMs;

        Step(long idleMs) {
            this.idleMs = idleMs;
        }

        @Override
        public Iterator<Row> call(String key, Iterator<Row> rows, GroupState<Life> state) {
            if (state.hasTimedOut()) { // idle past the watermark: the key's life ended
                state.remove();
                return Collections.emptyIterator();
            }
            List<Long> times = new ArrayList<>();
            while (rows.hasNext()) {
                times.add(rows.next().getLong(1));
            }
            Collections.sort(times);
            Life life = state.exists() ? state.get() : null;
            for (long t : times) {
                if (life == null || t - life.lastMs > idleMs) {
                    life = new Life(); // a new life: what came before it is not counted
                    life.lastMs = t;
                }
                life.count += 1;
                life.lastMs = Math.max(life.lastMs, t);
            }
            state.update(life);
            // Timed out once the watermark passes it: an event then still within idle of the last one would be
            // behind the watermark, which Spark drops as late before it reaches this function.
            state.setTimeoutTimestamp(life.lastMs + idleMs);
            return Collections.singletonList(RowFactory.create(key, life.count, life.lastMs)).iterator();
        }
    }
}
