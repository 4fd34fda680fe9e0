package baton.state;

import java.util.HashMap;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.streaming.state.KeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.NoPrefixKeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.ReadStateStore;
import org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider;
import org.apache.spark.sql.execution.streaming.state.StateSchemaProvider;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreCheckpointInfo;
import org.apache.spark.sql.execution.streaming.state.StateStoreConf;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.execution.streaming.state.StateStoreIterator;
import org.apache.spark.sql.execution.streaming.state.StateStoreMetrics;
import org.apache.spark.sql.execution.streaming.state.UnsafeRowPair;
import org.apache.spark.sql.types.StructType;

import scala.Option;
import scala.collection.Iterator;
import scala.collection.immutable.Set;

/**
 * Spark's RocksDB state store with the last committed version's rows also kept in the JVM's heap, so a
 * batch's lookups of keys it has seen find them without a call into RocksDB.
 *
 * <p>Why: at the seed's rate RocksDB's gets are ~30 % of a slot's task time (3.4 us a key, timed by
 * RocksDB itself: a skip list of up to five batches' updates, then the files; bench/HISTORY.md).
 * Everything else (the writes, which still go to RocksDB first, its changelogs, snapshots, iterators,
 * metrics, recovery) is RocksDB's, unchanged: the cache only answers {@code get}.
 *
 * <p>Why it is right: the cache holds rows of exactly one committed version ({@link StateCache}). A store
 * for that version reads through it; a store for any other version (a retried batch, a restart, a
 * reader of an older version) empties it first. A write store's own puts and removes are kept aside
 * and reach the cache only when RocksDB has committed them, as the next version; an aborted batch's
 * never do. Stores with column families or several values per key (not a streaming aggregation's) are
 * RocksDB's alone.
 */
public class CachedRocksDBStateStoreProvider extends RocksDBStateStoreProvider {
    /** Rows the cache holds at most (a state larger than this is served by RocksDB beyond it). */
    public static final String MAX_KEYS_CONF = "spark.sql.streaming.stateStore.baton.cacheMaxKeys";
    static final int DEFAULT_MAX_KEYS = 250_000;  // baton.apps.StateSettings.cache_keys

    private final StateCache cache = new StateCache();
    private boolean cacheable;

    @Override
    public void init(StateStoreId stateStoreId, StructType keySchema, StructType valueSchema,
                     KeyStateEncoderSpec keyStateEncoderSpec, boolean useColumnFamilies, StateStoreConf storeConf,
                     Configuration hadoopConf, boolean useMultipleValuesPerKey,
                     Option<StateSchemaProvider> stateSchemaProvider) {
        super.init(stateStoreId, keySchema, valueSchema, keyStateEncoderSpec, useColumnFamilies, storeConf, hadoopConf,
                useMultipleValuesPerKey, stateSchemaProvider);
        cacheable = !useColumnFamilies && !useMultipleValuesPerKey
                && keyStateEncoderSpec instanceof NoPrefixKeyStateEncoderSpec;
        Option<String> max = storeConf.sqlConfs().get(MAX_KEYS_CONF);
        cache.maxKeys = max.isDefined() ? Integer.parseInt(max.get().trim()) : DEFAULT_MAX_KEYS;
    }

    @Override
    public StateStore getStore(long version, Option<String> uniqueId, boolean forceSnapshotOnCommit,
                               boolean loadEmpty) {
        StateStore store = super.getStore(version, uniqueId, forceSnapshotOnCommit, loadEmpty);
        return wrap(store, version, uniqueId.isDefined() || loadEmpty);
    }

    @Override
    public StateStore getReadStore(long version, Option<String> uniqueId) {
        StateStore store = super.getReadStore(version, uniqueId);
        return wrap(store, version, uniqueId.isDefined());
    }

    @Override
    public StateStore upgradeReadStoreToWriteStore(ReadStateStore readStore, long version, Option<String> uniqueId,
                                                   boolean forceSnapshotOnCommit) {
        ReadStateStore inner = readStore instanceof CachedStore ? ((CachedStore) readStore).inner : readStore;
        StateStore store = super.upgradeReadStoreToWriteStore(inner, version, uniqueId, forceSnapshotOnCommit);
        return wrap(store, version, uniqueId.isDefined());
    }

    @Override
    public void close() {
        cache.invalidate();
        super.close();
    }

    private StateStore wrap(StateStore store, long version, boolean uncached) {
        if (!cacheable || uncached || cache.maxKeys <= 0) {  // checkpoint ids, an empty load: RocksDB's alone
            cache.invalidate();
            return store;
        }
        cache.at(version);
        return new CachedStore(store, version, cache);
    }

    /** The rows of one committed version, by key (both copies the cache owns). */
    static final class StateCache {
        private final HashMap<UnsafeRow, UnsafeRow> rows = new HashMap<>();
        private long version = -1;
        volatile int maxKeys = DEFAULT_MAX_KEYS;

        /** From now on the cache is of `v`: emptied unless it already was. */
        synchronized void at(long v) {
            if (v != version) {
                rows.clear();
                version = v;
            }
        }

        /** The row of `key` in version `v`, or null if the cache does not know it. */
        synchronized UnsafeRow get(long v, UnsafeRow key) {
            return v == version ? rows.get(key) : null;
        }

        /** `value` is `key`'s row in version `v`, read from RocksDB. */
        synchronized void fill(long v, UnsafeRow key, UnsafeRow value) {
            if (v == version && rows.size() < maxKeys) {
                rows.put(key.copy(), value.copy());
            }
        }

        /**
         * RocksDB committed `base` + `changes` as `committed`: the cache moves with it if it was at `base`
         * (changes: key -> row, or null for a removed key), else it knows nothing.
         */
        synchronized void committed(long base, long committed, Map<UnsafeRow, UnsafeRow> changes, boolean complete) {
            if (base != version || !complete) {
                rows.clear();
                version = complete ? committed : -1;
                return;
            }
            for (Map.Entry<UnsafeRow, UnsafeRow> change : changes.entrySet()) {
                UnsafeRow value = change.getValue();
                if (value == null) {
                    rows.remove(change.getKey());
                    continue;
                }
                UnsafeRow cached = rows.get(change.getKey());
                if (cached != null) {
                    // Into the row the cache has: an aggregation's buffer keeps its size, so the cache's
                    // rows stay where the collector has put them, and the change's copy dies young.
                    cached.copyFrom(value);
                } else if (rows.size() < maxKeys) {
                    rows.put(change.getKey(), value);
                }
            }
            version = committed;
        }

        synchronized void invalidate() {
            rows.clear();
            version = -1;
        }
    }

    /** RocksDB's store for one version, its gets answered from the cache where it can. */
    static final class CachedStore implements StateStore {
        final StateStore inner;
        private final long version;
        private final StateCache cache;
        // This store's writes, each key's last (key -> row, null: removed); RocksDB has
        // them already, the cache gets them once they are committed.
        private final HashMap<UnsafeRow, UnsafeRow> changes = new HashMap<>();
        private boolean changesComplete = true;  // false after a write the cache cannot follow (merge, ranges)

        CachedStore(StateStore inner, long version, StateCache cache) {
            this.inner = inner;
            this.version = version;
            this.cache = cache;
        }

        private static boolean isDefault(String colFamilyName) {
            return StateStore.DEFAULT_COL_FAMILY_NAME().equals(colFamilyName);
        }

        @Override
        public UnsafeRow get(UnsafeRow key, String colFamilyName) {
            if (!isDefault(colFamilyName)) {
                return inner.get(key, colFamilyName);
            }
            if (changes.containsKey(key)) {
                UnsafeRow written = changes.get(key);
                return written == null ? null : written.copy();
            }
            UnsafeRow cached = cache.get(version, key);
            if (cached != null) {
                return cached.copy();
            }
            UnsafeRow value = inner.get(key, colFamilyName);
            if (value != null) {
                cache.fill(version, key, value);
            }
            return value;
        }

        @Override
        public void put(UnsafeRow key, UnsafeRow value, String colFamilyName) {
            inner.put(key, value, colFamilyName);
            if (isDefault(colFamilyName)) {
                changes.put(key.copy(), value.copy());
            } else {
                changesComplete = false;
            }
        }

        @Override
        public void remove(UnsafeRow key, String colFamilyName) {
            inner.remove(key, colFamilyName);
            if (isDefault(colFamilyName)) {
                changes.put(key.copy(), null);
            } else {
                changesComplete = false;
            }
        }

        @Override
        public long commit() {
            long committed = inner.commit();
            cache.committed(version, committed, changes, changesComplete);
            changes.clear();
            return committed;
        }

        @Override
        public void abort() {
            changes.clear();
            inner.abort();
        }

        @Override
        public void release() {
            inner.release();
        }

        // Writes the cache does not follow: after any of them it knows nothing once committed.
        @Override
        public void putList(UnsafeRow key, UnsafeRow[] values, String colFamilyName) {
            changesComplete = false;
            inner.putList(key, values, colFamilyName);
        }

        @Override
        public void merge(UnsafeRow key, UnsafeRow value, String colFamilyName) {
            changesComplete = false;
            inner.merge(key, value, colFamilyName);
        }

        @Override
        public void mergeList(UnsafeRow key, UnsafeRow[] values, String colFamilyName) {
            changesComplete = false;
            inner.mergeList(key, values, colFamilyName);
        }

        @Override
        public void deleteRange(UnsafeRow beginKey, UnsafeRow endKey, String colFamilyName) {
            changesComplete = false;
            inner.deleteRange(beginKey, endKey, colFamilyName);
        }

        @Override
        public boolean removeColFamilyIfExists(String colFamilyName) {
            changesComplete = false;
            return inner.removeColFamilyIfExists(colFamilyName);
        }

        // The rest is RocksDB's.
        @Override
        public StateStoreId id() {
            return inner.id();
        }

        @Override
        public long version() {
            return inner.version();
        }

        @Override
        public Iterator<UnsafeRow> multiGet(UnsafeRow[] keys, String colFamilyName) {
            return inner.multiGet(keys, colFamilyName);
        }

        @Override
        public boolean keyExists(UnsafeRow key, String colFamilyName) {
            return inner.keyExists(key, colFamilyName);
        }

        @Override
        public Iterator<UnsafeRow> valuesIterator(UnsafeRow key, String colFamilyName) {
            return inner.valuesIterator(key, colFamilyName);
        }

        @Override
        public StateStoreIterator<UnsafeRowPair> prefixScan(UnsafeRow prefixKey, String colFamilyName) {
            return inner.prefixScan(prefixKey, colFamilyName);
        }

        @Override
        public StateStoreIterator<UnsafeRowPair> prefixScanWithMultiValues(UnsafeRow prefixKey, String colFamilyName) {
            return inner.prefixScanWithMultiValues(prefixKey, colFamilyName);
        }

        @Override
        public StateStoreIterator<UnsafeRowPair> rangeScan(Option<UnsafeRow> start, Option<UnsafeRow> end,
                                                           String colFamilyName) {
            return inner.rangeScan(start, end, colFamilyName);
        }

        @Override
        public StateStoreIterator<UnsafeRowPair> rangeScanWithMultiValues(Option<UnsafeRow> start,
                                                                          Option<UnsafeRow> end, String colFamilyName) {
            return inner.rangeScanWithMultiValues(start, end, colFamilyName);
        }

        @Override
        public StateStoreIterator<UnsafeRowPair> iterator(String colFamilyName) {
            return inner.iterator(colFamilyName);
        }

        @Override
        public StateStoreIterator<UnsafeRowPair> iteratorWithMultiValues(String colFamilyName) {
            return inner.iteratorWithMultiValues(colFamilyName);
        }

        @Override
        public Set<String> allColumnFamilyNames() {
            return inner.allColumnFamilyNames();
        }

        @Override
        public void registerColFamily(String colFamilyName, StructType keySchema, StructType valueSchema,
                                      KeyStateEncoderSpec keyStateEncoderSpec, boolean useMultipleValuesPerKey,
                                      boolean isInternal) {
            inner.registerColFamily(colFamilyName, keySchema, valueSchema, keyStateEncoderSpec, useMultipleValuesPerKey,
                    isInternal);
        }

        @Override
        public void createColFamilyIfAbsent(String colFamilyName, StructType keySchema, StructType valueSchema,
                                            KeyStateEncoderSpec keyStateEncoderSpec, boolean useMultipleValuesPerKey,
                                            boolean isInternal) {
            inner.createColFamilyIfAbsent(colFamilyName, keySchema, valueSchema, keyStateEncoderSpec,
                    useMultipleValuesPerKey, isInternal);
        }

        @Override
        public StateStoreMetrics metrics() {
            return inner.metrics();
        }

        @Override
        public StateStoreCheckpointInfo getStateStoreCheckpointInfo() {
            return inner.getStateStoreCheckpointInfo();
        }

        @Override
        public boolean hasCommitted() {
            return inner.hasCommitted();
        }

        @Override
        public String toString() {
            return "Cached" + inner;
        }
    }
}
