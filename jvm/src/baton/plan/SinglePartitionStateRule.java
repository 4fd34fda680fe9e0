package baton.plan;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.ColumnarRule;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2ScanExecBase;
import org.apache.spark.sql.execution.exchange.REQUIRED_BY_STATEFUL_OPERATOR$;
import org.apache.spark.sql.execution.exchange.ShuffleExchangeExec;

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

    /** The plan without the shuffles {@link #needless} finds. */
    static final class DropShuffle extends Rule<SparkPlan> {
        @Override
        public SparkPlan apply(SparkPlan plan) {
            return plan.transformUp(new AbstractPartialFunction<SparkPlan, SparkPlan>() {
                @Override
                public boolean isDefinedAt(SparkPlan node) {
                    return needless(node);
                }

                @Override
                public SparkPlan apply(SparkPlan node) {
                    return ((ShuffleExchangeExec) node).child();
                }
            });
        }
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
        SparkPlan below = shuffle.child();
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
