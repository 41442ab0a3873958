// The franz-go (kgo + kadm) row of the client compatibility matrix: runs every check against
// the broker at -bootstrap and prints `CHECK <name> ok|FAIL <reason>` lines.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"sluice/compat/goclients/internal/check"
)

var (
	flags    check.Flags
	topic    string // the main topic: 3 partitions, every record goes to partition 0
	txnTopic string // transactions' records
	etlTopic string // the consume-transform-produce check's output
	group    string
)

func opts(extra ...kgo.Opt) []kgo.Opt {
	return append([]kgo.Opt{
		kgo.SeedBrokers(flags.Bootstrap),
		kgo.ClientID("sluice-compat-franz-go"),
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelWarn, func() string { return "[kgo] " })),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.FetchMaxWait(500 * time.Millisecond),
	}, extra...)
}

func newClient(extra ...kgo.Opt) *kgo.Client {
	cl, err := kgo.NewClient(opts(extra...)...)
	if err != nil {
		panic(err) // only invalid options fail here
	}
	return cl
}

// poll returns what the client fetched within a second; fetch errors other than our own
// deadline are failures.
func poll(cl *kgo.Client) check.PollFunc {
	return func(ctx context.Context) ([]check.Record, error) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		fs := cl.PollFetches(pctx)
		var err error
		fs.EachError(func(t string, p int32, e error) {
			if !errors.Is(e, context.DeadlineExceeded) && !errors.Is(e, context.Canceled) && err == nil {
				err = fmt.Errorf("fetch %s/%d: %w", t, p, e)
			}
		})
		var out []check.Record
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, check.Record{Offset: r.Offset, Value: string(r.Value)})
		})
		return out, err
	}
}

func produceSync(ctx context.Context, cl *kgo.Client, topic string, values ...string) ([]*kgo.Record, error) {
	var rs []*kgo.Record
	for _, v := range values {
		rs = append(rs, &kgo.Record{Topic: topic, Partition: 0, Value: []byte(v)})
	}
	return rs, cl.ProduceSync(ctx, rs...).FirstErr()
}

// expectOffsets checks that produced records got consecutive offsets from `from`.
func expectOffsets(rs []*kgo.Record, from int64) error {
	for i, r := range rs {
		if r.Offset != from+int64(i) {
			return fmt.Errorf("record %d (%s) was acknowledged at offset %d, want %d", i, r.Value, r.Offset, from+int64(i))
		}
	}
	return nil
}

func endOffset(ctx context.Context, adm *kadm.Client, t string) (int64, error) {
	listed, err := adm.ListEndOffsets(ctx, t)
	if err != nil {
		return 0, err
	}
	o, ok := listed.Lookup(t, 0)
	if !ok {
		return 0, fmt.Errorf("no end offset for %s/0", t)
	}
	return o.Offset, o.Err
}

func main() {
	flags = check.Parse("franz-go")
	topic, txnTopic, etlTopic = flags.Prefix+"-t", flags.Prefix+"-txn", flags.Prefix+"-etl"
	group = flags.Prefix + "-g"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/twmb/franz-go" || d.Path == "github.com/twmb/franz-go/pkg/kadm" {
				check.Info("%s %s", d.Path, d.Version)
			}
		}
	}
	admCl := newClient()
	defer admCl.Close()
	adm := kadm.NewClient(admCl)

	check.Run("admin_create_topic", 30*time.Second, func(ctx context.Context) error {
		resp, err := adm.CreateTopics(ctx, 3, 1, nil, topic)
		if err != nil {
			return err
		}
		if err := resp.Error(); err != nil {
			return err
		}
		for _, t := range []string{txnTopic, etlTopic} {
			resp, err := adm.CreateTopics(ctx, 1, 1, nil, t)
			if err == nil {
				err = resp.Error()
			}
			if err != nil {
				return fmt.Errorf("%s: %w", t, err)
			}
		}
		// Creating it again is refused with TOPIC_ALREADY_EXISTS.
		again, err := adm.CreateTopics(ctx, 3, 1, nil, topic)
		if err != nil {
			return err
		}
		if r, _ := again.On(topic, nil); !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("creating %s a second time answered %v, want TOPIC_ALREADY_EXISTS", topic, r.Err)
		}
		return nil
	})

	check.Run("admin_describe_topic", 30*time.Second, func(ctx context.Context) error {
		return check.Poll(ctx, "3 partitions with a leader", 200*time.Millisecond, func() (bool, error) {
			md, err := adm.Metadata(ctx, topic)
			if err != nil {
				return false, err
			}
			td, ok := md.Topics[topic]
			if !ok {
				return false, fmt.Errorf("topic missing from metadata")
			}
			if td.Err != nil {
				return false, td.Err
			}
			if len(td.Partitions) != 3 {
				return false, fmt.Errorf("%d partitions, want 3", len(td.Partitions))
			}
			brokers := map[int32]bool{}
			for _, b := range md.Brokers {
				brokers[b.NodeID] = true
			}
			for p := int32(0); p < 3; p++ {
				pd, ok := td.Partitions[p]
				if !ok || pd.Err != nil || !brokers[pd.Leader] || len(pd.Replicas) != 1 || len(pd.ISR) != 1 {
					return false, fmt.Errorf("partition %d: %+v (brokers %v)", p, pd, md.Brokers)
				}
			}
			return true, nil
		})
	})

	plain := newClient(kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.AllISRAcks()))
	defer plain.Close()
	check.Run("produce", 30*time.Second, func(ctx context.Context) error {
		var values []string
		for i := 0; i < check.PlainCount; i++ {
			values = append(values, check.PlainValue(i))
		}
		rs, err := produceSync(ctx, plain, topic, values...)
		if err != nil {
			return err
		}
		return expectOffsets(rs, 0)
	})

	check.Run("produce_idempotent", 30*time.Second, func(ctx context.Context) error {
		idem := newClient() // idempotent writes are franz-go's default
		defer idem.Close()
		var values []string
		for i := 0; i < check.IdemCount; i++ {
			values = append(values, check.IdemValue(i))
		}
		rs, err := produceSync(ctx, idem, topic, values...)
		if err != nil {
			return err
		}
		if rs[0].ProducerID < 0 {
			return fmt.Errorf("the records carry no producer id (%d): the write was not idempotent", rs[0].ProducerID)
		}
		check.Info("idempotent producer id %d epoch %d", rs[0].ProducerID, rs[0].ProducerEpoch)
		return expectOffsets(rs, check.PlainCount)
	})

	check.Run("consume_from_beginning", 30*time.Second, func(ctx context.Context) error {
		c := newClient(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
		defer c.Close()
		want := check.Expected()
		got, err := check.ReadN(ctx, poll(c), len(want))
		if err != nil {
			return err
		}
		return check.ExpectSequence(got, want, 0)
	})

	check.Run("consume_from_end", 45*time.Second, func(ctx context.Context) error {
		c := newClient(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtEnd()}}))
		defer c.Close()
		_, err := check.FromEnd(ctx, func(ctx context.Context, v string) error {
			_, err := produceSync(ctx, plain, topic, v)
			return err
		}, poll(c), int64(len(check.Expected())))
		return err
	})

	groupOpts := func(g string, extra ...kgo.Opt) []kgo.Opt {
		return append([]kgo.Opt{
			kgo.ConsumerGroup(g), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		}, extra...)
	}
	var memberB *kgo.Client
	check.Run("group_commit_and_resume", 60*time.Second, func(ctx context.Context) error {
		var err error
		memberB, err = commitAndResume(ctx, adm, group, groupOpts(group)...)
		return err
	})

	check.Run("admin_describe_group", 30*time.Second, func(ctx context.Context) error {
		if memberB == nil {
			return fmt.Errorf("no member to describe (group_commit_and_resume failed)")
		}
		err := check.Poll(ctx, "group Stable with 1 member assigned the topic", 200*time.Millisecond, func() (bool, error) {
			described, err := adm.DescribeGroups(ctx, group)
			if err != nil {
				return false, err
			}
			d := described[group]
			if d.Err != nil {
				return false, d.Err
			}
			if d.State != "Stable" || d.ProtocolType != "consumer" || len(d.Members) != 1 {
				return false, fmt.Errorf("state %q protocol type %q %d members", d.State, d.ProtocolType, len(d.Members))
			}
			assigned := d.AssignedPartitions()
			for p := int32(0); p < 3; p++ {
				if !assigned.Lookup(topic, p) {
					return false, fmt.Errorf("the member is not assigned %s/%d: %v", topic, p, assigned)
				}
			}
			return true, nil
		})
		if err != nil {
			return err
		}
		offsets, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return err
		}
		if o, ok := offsets.Lookup(topic, 0); !ok || o.Err != nil || o.At != check.GroupFirst {
			return fmt.Errorf("committed offset of %s/0 is %+v, want %d", topic, o, check.GroupFirst)
		}
		memberB.Close()
		memberB = nil
		return check.Poll(ctx, "group Empty after its member left", 200*time.Millisecond, func() (bool, error) {
			described, err := adm.DescribeGroups(ctx, group)
			if err != nil {
				return false, err
			}
			d := described[group]
			if d.Err != nil {
				return false, d.Err
			}
			return d.State == "Empty" && len(d.Members) == 0, fmt.Errorf("state %q, %d members", d.State, len(d.Members))
		})
	})
	if memberB != nil {
		memberB.Close()
	}

	// KIP-848: the same commit-and-resume with the broker assigning partitions
	// (ConsumerGroupHeartbeat instead of JoinGroup/SyncGroup).
	check.Run("group_consumer_protocol", 60*time.Second, func(ctx context.Context) error {
		g := flags.Prefix + "-g848"
		b, err := commitAndResume(ctx, adm, g, groupOpts(g, kgo.ServerSideBalancer(), kgo.Balancers(kgo.RangeBalancer()))...)
		if err != nil {
			return err
		}
		defer b.Close()
		described, err := adm.DescribeConsumerGroups(ctx, g)
		if err != nil {
			return fmt.Errorf("ConsumerGroupDescribe: %w", err)
		}
		d := described[g]
		if d.Err != nil || d.State != "Stable" || len(d.Members) != 1 {
			return fmt.Errorf("ConsumerGroupDescribe: state %q, %d members, err %v", d.State, len(d.Members), d.Err)
		}
		// A group of the consumer protocol: the broker's range assignor gave the member every
		// partition, and the member has an epoch.
		m := d.Members[0]
		if d.AssignorName != "range" || m.MemberEpoch <= 0 {
			return fmt.Errorf("ConsumerGroupDescribe: assignor %q, member epoch %d", d.AssignorName, m.MemberEpoch)
		}
		for p := int32(0); p < 3; p++ {
			if !m.Assignment.Lookup(topic, p) {
				return fmt.Errorf("ConsumerGroupDescribe: the member is not assigned %s/%d: %v", topic, p, m.Assignment)
			}
		}
		return nil
	})

	check.Run("transactions", 60*time.Second, func(ctx context.Context) error {
		return transactions(ctx)
	})

	check.Run("transactions_read_uncommitted", 30*time.Second, func(ctx context.Context) error {
		return readTxnTopic(ctx, kgo.ReadUncommitted(), check.TxnReadUncommitted())
	})

	check.Run("transactions_send_offsets", 60*time.Second, func(ctx context.Context) error {
		return consumeTransformProduce(ctx, adm)
	})

	check.Run("admin_delete_topic", 30*time.Second, func(ctx context.Context) error {
		resp, err := adm.DeleteTopics(ctx, topic, txnTopic, etlTopic)
		if err != nil {
			return err
		}
		if err := resp.Error(); err != nil {
			return err
		}
		return check.Poll(ctx, "the topic to leave the metadata", 200*time.Millisecond, func() (bool, error) {
			md, err := adm.Metadata(ctx) // all topics: never auto-creates
			if err != nil {
				return false, err
			}
			_, still := md.Topics[topic]
			return !still, fmt.Errorf("%s still listed", topic)
		})
	})
}

// commitAndResume: member A of group g reads the first GroupFirst records, commits, leaves;
// member B then must start exactly at the committed offset and read to the end. Returns B
// (still in the group) for the describe check.
func commitAndResume(ctx context.Context, adm *kadm.Client, g string, gopts ...kgo.Opt) (*kgo.Client, error) {
	end, err := endOffset(ctx, adm, topic)
	if err != nil {
		return nil, fmt.Errorf("end offset: %w", err)
	}
	a := newClient(gopts...)
	got, err := check.ReadN(ctx, poll(a), check.GroupFirst)
	if err != nil {
		a.Close()
		return nil, fmt.Errorf("member A: %w", err)
	}
	if err := check.ExpectRange(got[:check.GroupFirst], 0, check.GroupFirst); err != nil {
		a.Close()
		return nil, fmt.Errorf("member A: %w", err)
	}
	// Commit through the GroupFirst-th record only, whatever else A fetched.
	last := &kgo.Record{Topic: topic, Partition: 0, Offset: check.GroupFirst - 1, LeaderEpoch: -1}
	if err := a.CommitRecords(ctx, last); err != nil {
		a.Close()
		return nil, fmt.Errorf("member A commit: %w", err)
	}
	a.Close() // leaves the group
	b := newClient(gopts...)
	got, err = check.ReadThrough(ctx, poll(b), end-1)
	if err == nil {
		err = check.ExpectRange(got, check.GroupFirst, end)
	}
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("member B: %w", err)
	}
	return b, nil
}

func transactions(ctx context.Context) error {
	tx := newClient(kgo.TransactionalID(flags.Prefix+"-tx"), kgo.TransactionTimeout(30*time.Second))
	defer tx.Close()
	round := func(values []string, commit kgo.TransactionEndTry) error {
		if err := tx.BeginTransaction(); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		if _, err := produceSync(ctx, tx, txnTopic, values...); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
		if err := tx.EndTransaction(ctx, commit); err != nil {
			return fmt.Errorf("end (commit=%v): %w", commit, err)
		}
		return nil
	}
	if err := round(check.TxnCommitted, kgo.TryCommit); err != nil {
		return fmt.Errorf("committed transaction: %w", err)
	}
	if err := round(check.TxnAborted, kgo.TryAbort); err != nil {
		return fmt.Errorf("aborted transaction: %w", err)
	}
	if err := round([]string{check.TxnFinal}, kgo.TryCommit); err != nil {
		return fmt.Errorf("last transaction: %w", err)
	}
	return readTxnTopic(ctx, kgo.ReadCommitted(), check.TxnReadCommitted())
}

// readTxnTopic reads the transactions' topic at an isolation level through the last record.
func readTxnTopic(ctx context.Context, level kgo.IsolationLevel, want []string) error {
	c := newClient(kgo.FetchIsolationLevel(level),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{txnTopic: {0: kgo.NewOffset().AtStart()}}))
	defer c.Close()
	got, err := check.ReadValue(ctx, poll(c), check.TxnFinal)
	if err != nil {
		return err
	}
	return check.SameValues(check.Values(got), want)
}

// consumeTransformProduce: a GroupTransactSession consumes the main topic in its own group
// and, in one transaction, writes a record per record read and commits the group's offsets
// (AddOffsetsToTxn + TxnOffsetCommit). Afterwards the group's committed offset is just past
// what was read and the output holds one record per input record.
func consumeTransformProduce(ctx context.Context, adm *kadm.Client) error {
	g := flags.Prefix + "-etl-g"
	s, err := kgo.NewGroupTransactSession(opts(
		kgo.TransactionalID(flags.Prefix+"-etl-tx"), kgo.TransactionTimeout(30*time.Second),
		kgo.ConsumerGroup(g), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)...)
	if err != nil {
		return err
	}
	defer s.Close()
	var in []*kgo.Record
	for len(in) == 0 {
		if ctx.Err() != nil {
			return fmt.Errorf("the session read nothing")
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := s.PollFetches(pctx)
		cancel()
		var ferr error
		fs.EachError(func(t string, p int32, e error) {
			if !errors.Is(e, context.DeadlineExceeded) && !errors.Is(e, context.Canceled) {
				ferr = fmt.Errorf("fetch %s/%d: %w", t, p, e)
			}
		})
		if ferr != nil {
			return ferr
		}
		in = fs.Records()
	}
	if err := s.Begin(); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	var values []string
	for _, r := range in {
		values = append(values, "etl-"+string(r.Value))
	}
	var out []*kgo.Record
	for _, v := range values {
		out = append(out, &kgo.Record{Topic: etlTopic, Partition: 0, Value: []byte(v)})
	}
	if err := s.ProduceSync(ctx, out...).FirstErr(); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	committed, err := s.End(ctx, kgo.TryCommit)
	if err != nil {
		return fmt.Errorf("end: %w", err)
	}
	if !committed {
		return fmt.Errorf("the session aborted the transaction")
	}
	// The offsets become visible once the commit markers are written, which Kafka does after
	// answering EndTxn: wait for them.
	next := in[len(in)-1].Offset + 1
	err = check.Poll(ctx, fmt.Sprintf("the group's committed offset to be %d", next), 100*time.Millisecond, func() (bool, error) {
		offsets, err := adm.FetchOffsets(ctx, g)
		if err != nil {
			return false, err
		}
		o, ok := offsets.Lookup(topic, 0)
		if !ok {
			return false, fmt.Errorf("no committed offset for %s/0", topic)
		}
		return o.Err == nil && o.At == next, fmt.Errorf("committed offset of %s/0 is %d (err %v)", topic, o.At, o.Err)
	})
	if err != nil {
		return err
	}
	c := newClient(kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{etlTopic: {0: kgo.NewOffset().AtStart()}}))
	defer c.Close()
	got, err := check.ReadN(ctx, poll(c), len(values))
	if err != nil {
		return fmt.Errorf("reading the output: %w", err)
	}
	check.Info("consume-transform-produce: %d records in one transaction", len(values))
	return check.SameValues(check.Values(got), values)
}
