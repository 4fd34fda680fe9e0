package baton.plan;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression;
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateMode;
import org.apache.spark.sql.catalyst.expressions.aggregate.Partial$;
import org.apache.spark.sql.catalyst.expressions.aggregate.PartialMerge$;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.ColumnarRule;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.aggregate.BaseAggregateExec;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2ScanExecBase;
import org.apache.spark.sql.execution.exchange.REQUIRED_BY_STATEFUL_OPERATOR$;
import org.apache.spark.sql.execution.exchange.ShuffleExchangeExec;
import org.apache.spark.sql.execution.streaming.operators.stateful.StateStoreRestoreExec;

import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction1;
import scala.runtime.AbstractPartialFunction;
import scala.runtime.BoxedUnit;

/**
 * Drops the shuffle in front of a stateful operator whose state has one partition when what it shuffles
 * already is one partition: one source scan of one input partition, through operators of one child each.
 *
 * <p>Why: a slot's source reads on the driver and hands Spark one partition a batch, and a new
 * checkpoint's state has one partition (baton.apps.StateSettings.partitions). Spark still plans a hash
 * shuffle into that one partition (the stateful operator asks for hash partitioning by its keys, which a
 * scan's unknown partitioning never satisfies), so every batch runs a second stage: its task, its
 * shuffle files, its scheduling. Moving every row of one partition into one partition changes nothing:
 * the state partition's task reads the same rows, and its state store is the same (partition 0).
 *
 * <p>Without the shuffle, the aggregation Spark plans to merge what each input partition's partial
 * aggregation sent through it (a streaming aggregation's "partial merge" in front of the state's restore)
 * merges nothing: one partition's partial aggregation has one row per key already. That aggregation goes
 * too ({@link #needlessMerge}), the restore reading the partial aggregation's rows, which have the same
 * columns (the keys, then the aggregates' buffers). A batch then builds three hash maps of its keys, not four.
 *
 * <p>Registered as a session extension ({@code spark.sql.extensions=baton.plan.SinglePartitionStateRule}):
 * it runs among the physical plan's preparations, after Spark has placed its exchanges, on every
 * micro-batch's plan. Anything else (several input partitions, several state partitions, two sources, a
 * shuffle a user asked for) keeps its exchange.
 */
public class SinglePartitionStateRule extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {

    @Override
    public BoxedUnit apply(SparkSessionExtensions extensions) {
        extensions.injectColumnar(new AbstractFunction1<SparkSession, ColumnarRule>() {
            @Override
            public ColumnarRule apply(SparkSession session) {
                return new ColumnarRule() {
                    @Override
                    public Rule<SparkPlan> preColumnarTransitions() {
                        return new DropShuffle();
                    }
                };
            }
        });
        return BoxedUnit.UNIT;
    }

    /** The plan without the shuffles {@link #needless} finds, then without the merges {@link #needlessMerge} finds. */
    static final class DropShuffle extends Rule<SparkPlan> {
        @Override
        public SparkPlan apply(SparkPlan plan) {
            SparkPlan unshuffled = plan.transformUp(new AbstractPartialFunction<SparkPlan, SparkPlan>() {
                @Override
                public boolean isDefinedAt(SparkPlan node) {
                    return needless(node);
                }

                @Override
                public SparkPlan apply(SparkPlan node) {
                    return ((ShuffleExchangeExec) node).child();
                }
            });
            return unshuffled.transformUp(new AbstractPartialFunction<SparkPlan, SparkPlan>() {
                @Override
                public boolean isDefinedAt(SparkPlan node) {
                    return node instanceof StateStoreRestoreExec && needlessMerge(((StateStoreRestoreExec) node).child());
                }

                @Override
                public SparkPlan apply(SparkPlan node) {
                    SparkPlan partial = ((StateStoreRestoreExec) node).child().children().head();
                    return node.withNewChildren(seqOf(partial));
                }
            });
        }
    }

    private static Seq<SparkPlan> seqOf(SparkPlan plan) {
        return CollectionConverters.asScala(java.util.List.of(plan)).toList();
    }

    /** A stateful operator's shuffle into one partition of what one scan reads as one partition. */
    static boolean needless(SparkPlan node) {
        if (!(node instanceof ShuffleExchangeExec)) {
            return false;
        }
        ShuffleExchangeExec shuffle = (ShuffleExchangeExec) node;
        if (shuffle.shuffleOrigin() != REQUIRED_BY_STATEFUL_OPERATOR$.MODULE$
                || shuffle.outputPartitioning().numPartitions() != 1) {
            return false;
        }
        return readsOnePartition(shuffle.child());
    }

    /**
     * A state restore's input that merges the rows of a partial aggregation of one partition, with nothing
     * between them: the partial aggregation already has one row per key, and both have the same columns.
     */
    static boolean needlessMerge(SparkPlan node) {
        if (!(node instanceof BaseAggregateExec) || !(node.children().head() instanceof BaseAggregateExec)) {
            return false;
        }
        BaseAggregateExec merge = (BaseAggregateExec) node;
        BaseAggregateExec partial = (BaseAggregateExec) node.children().head();
        if (!allIn(merge, PartialMerge$.MODULE$) || !allIn(partial, Partial$.MODULE$)
                || merge.groupingExpressions().isEmpty()  // without keys: a row even for no input
                || merge.groupingExpressions().size() != partial.groupingExpressions().size()
                || !sameColumns(merge.output(), partial.output())) {
            return false;
        }
        // The merge groups by the partial aggregation's keys: the first columns of its rows.
        for (int i = 0; i < merge.groupingExpressions().size(); i++) {
            NamedExpression key = merge.groupingExpressions().apply(i);
            if (!(key instanceof Attribute) || !key.exprId().equals(partial.output().apply(i).exprId())) {
                return false;
            }
        }
        return readsOnePartition(partial.child());
    }

    /** Every aggregate of `agg` in `mode`, none of them distinct. */
    private static boolean allIn(BaseAggregateExec agg, AggregateMode mode) {
        scala.collection.Iterator<AggregateExpression> it = agg.aggregateExpressions().iterator();
        if (!it.hasNext()) {
            return false;
        }
        while (it.hasNext()) {
            AggregateExpression e = it.next();
            if (e.isDistinct() || !e.mode().equals(mode)) {
                return false;
            }
        }
        return true;
    }

    private static boolean sameColumns(Seq<Attribute> a, Seq<Attribute> b) {
        if (a.size() != b.size()) {
            return false;
        }
        for (int i = 0; i < a.size(); i++) {
            Attribute x = a.apply(i);
            Attribute y = b.apply(i);
            if (!x.exprId().equals(y.exprId()) || !x.dataType().equals(y.dataType())) {
                return false;
            }
        }
        return true;
    }

    /** Operators of one child each, no shuffle among them, down to a scan of one input partition. */
    static boolean readsOnePartition(SparkPlan below) {
        while (below.children().size() == 1) {
            if (below instanceof ShuffleExchangeExec) {
                return false;
            }
            below = below.children().head();
        }
        return below instanceof DataSourceV2ScanExecBase  // a leaf
                && ((DataSourceV2ScanExecBase) below).inputPartitions().size() == 1;
    }
}
