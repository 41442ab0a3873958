// The Sarama (github.com/IBM/sarama) row of the client compatibility matrix: runs every check
// against the broker at -bootstrap with Config.Version = V4_0_0_0 and prints
// `CHECK <name> ok|FAIL <reason>` lines.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"sluice/compat/goclients/internal/check"
)

// The protocol level Sarama is told the broker speaks (it picks request versions from it).
var kafkaVersion = sarama.V4_0_0_0

var (
	flags    check.Flags
	addrs    []string
	topic    string
	txnTopic string
	etlTopic string
	group    string
)

func config() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = kafkaVersion
	c.ClientID = "sluice-compat-sarama"
	c.Metadata.AllowAutoTopicCreation = false
	c.Producer.Partitioner = sarama.NewManualPartitioner
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Return.Successes = true
	c.Producer.Return.Errors = true
	c.Consumer.Return.Errors = true
	c.Consumer.MaxWaitTime = 500 * time.Millisecond
	return c
}

func idempotent(c *sarama.Config) *sarama.Config {
	c.Producer.Idempotent = true
	c.Net.MaxOpenRequests = 1
	return c
}

func msgs(t string, values ...string) []*sarama.ProducerMessage {
	var out []*sarama.ProducerMessage
	for _, v := range values {
		out = append(out, &sarama.ProducerMessage{Topic: t, Partition: 0, Value: sarama.StringEncoder(v)})
	}
	return out
}

func sendAll(p sarama.SyncProducer, ms []*sarama.ProducerMessage) error {
	if err := p.SendMessages(ms); err != nil {
		var perrs sarama.ProducerErrors
		if errors.As(err, &perrs) && len(perrs) > 0 {
			return fmt.Errorf("%d messages failed, first: %w", len(perrs), perrs[0].Err)
		}
		return err
	}
	return nil
}

func expectOffsets(ms []*sarama.ProducerMessage, from int64) error {
	for i, m := range ms {
		if m.Offset != from+int64(i) {
			return fmt.Errorf("message %d was acknowledged at offset %d, want %d", i, m.Offset, from+int64(i))
		}
	}
	return nil
}

// partitionPoll reads what a partition consumer has, waiting up to a second for the first.
func partitionPoll(pc sarama.PartitionConsumer) check.PollFunc {
	return func(ctx context.Context) ([]check.Record, error) {
		var out []check.Record
		wait := time.NewTimer(time.Second)
		defer wait.Stop()
		for {
			select {
			case m := <-pc.Messages():
				out = append(out, check.Record{Offset: m.Offset, Value: string(m.Value)})
				if len(out) >= 500 {
					return out, nil
				}
				continue
			case err := <-pc.Errors():
				return out, err
			default:
			}
			if len(out) > 0 {
				return out, nil
			}
			select {
			case m := <-pc.Messages():
				out = append(out, check.Record{Offset: m.Offset, Value: string(m.Value)})
			case err := <-pc.Errors():
				return out, err
			case <-wait.C:
				return out, nil
			case <-ctx.Done():
				return out, nil
			}
		}
	}
}

func consumePartition(t string, offset int64, level sarama.IsolationLevel) (sarama.Consumer, sarama.PartitionConsumer, error) {
	c := config()
	c.Consumer.IsolationLevel = level
	consumer, err := sarama.NewConsumer(addrs, c)
	if err != nil {
		return nil, nil, err
	}
	pc, err := consumer.ConsumePartition(t, 0, offset)
	if err != nil {
		consumer.Close()
		return nil, nil, err
	}
	return consumer, pc, nil
}

func main() {
	flags = check.Parse("sarama")
	addrs = []string{flags.Bootstrap}
	topic, txnTopic, etlTopic = flags.Prefix+"-t", flags.Prefix+"-txn", flags.Prefix+"-etl"
	group = flags.Prefix + "-g"
	sarama.Logger = log.New(os.Stderr, "[sarama] ", log.Ltime|log.Lmicroseconds)
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/IBM/sarama" {
				check.Info("%s %s, Config.Version %s", d.Path, d.Version, kafkaVersion)
			}
		}
	}
	client, err := sarama.NewClient(addrs, config())
	if err != nil {
		check.Info("cannot connect: %v", err)
		os.Exit(1)
	}
	defer client.Close()
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		check.Info("cannot make the admin client: %v", err)
		os.Exit(1)
	}

	check.Run("admin_create_topic", 30*time.Second, func(ctx context.Context) error {
		if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 1}, false); err != nil {
			return err
		}
		for _, t := range []string{txnTopic, etlTopic} {
			if err := admin.CreateTopic(t, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false); err != nil {
				return fmt.Errorf("%s: %w", t, err)
			}
		}
		err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 1}, false)
		if !errors.Is(err, sarama.ErrTopicAlreadyExists) {
			return fmt.Errorf("creating %s a second time answered %v, want TOPIC_ALREADY_EXISTS", topic, err)
		}
		return nil
	})

	check.Run("admin_describe_topic", 30*time.Second, func(ctx context.Context) error {
		return check.Poll(ctx, "3 partitions with a leader", 200*time.Millisecond, func() (bool, error) {
			mds, err := admin.DescribeTopics([]string{topic})
			if err != nil {
				return false, err
			}
			if len(mds) != 1 || mds[0].Name != topic {
				return false, fmt.Errorf("described %d topics", len(mds))
			}
			md := mds[0]
			if md.Err != sarama.ErrNoError {
				return false, md.Err
			}
			if len(md.Partitions) != 3 {
				return false, fmt.Errorf("%d partitions, want 3", len(md.Partitions))
			}
			brokers, _, err := admin.DescribeCluster()
			if err != nil {
				return false, err
			}
			ids := map[int32]bool{}
			for _, b := range brokers {
				ids[b.ID()] = true
			}
			seen := map[int32]bool{}
			for _, p := range md.Partitions {
				if p.Err != sarama.ErrNoError || !ids[p.Leader] || len(p.Replicas) != 1 || len(p.Isr) != 1 {
					return false, fmt.Errorf("partition %d: leader %d replicas %v isr %v err %v", p.ID, p.Leader, p.Replicas, p.Isr, p.Err)
				}
				seen[p.ID] = true
			}
			return seen[0] && seen[1] && seen[2], fmt.Errorf("partition ids %v", seen)
		})
	})

	plain, err := sarama.NewSyncProducer(addrs, config())
	if err != nil {
		check.Info("cannot make a producer: %v", err)
		os.Exit(1)
	}
	defer plain.Close()

	check.Run("produce", 30*time.Second, func(ctx context.Context) error {
		var values []string
		for i := 0; i < check.PlainCount; i++ {
			values = append(values, check.PlainValue(i))
		}
		ms := msgs(topic, values...)
		if err := sendAll(plain, ms); err != nil {
			return err
		}
		return expectOffsets(ms, 0)
	})

	check.Run("produce_idempotent", 30*time.Second, func(ctx context.Context) error {
		p, err := sarama.NewSyncProducer(addrs, idempotent(config()))
		if err != nil {
			return err
		}
		defer p.Close()
		var values []string
		for i := 0; i < check.IdemCount; i++ {
			values = append(values, check.IdemValue(i))
		}
		ms := msgs(topic, values...)
		if err := sendAll(p, ms); err != nil {
			return err
		}
		return expectOffsets(ms, check.PlainCount)
	})

	check.Run("consume_from_beginning", 30*time.Second, func(ctx context.Context) error {
		c, pc, err := consumePartition(topic, sarama.OffsetOldest, sarama.ReadUncommitted)
		if err != nil {
			return err
		}
		defer c.Close()
		defer pc.Close()
		want := check.Expected()
		got, err := check.ReadN(ctx, partitionPoll(pc), len(want))
		if err != nil {
			return err
		}
		return check.ExpectSequence(got, want, 0)
	})

	check.Run("consume_from_end", 45*time.Second, func(ctx context.Context) error {
		c, pc, err := consumePartition(topic, sarama.OffsetNewest, sarama.ReadUncommitted)
		if err != nil {
			return err
		}
		defer c.Close()
		defer pc.Close()
		_, err = check.FromEnd(ctx, func(ctx context.Context, v string) error {
			return sendAll(plain, msgs(topic, v))
		}, partitionPoll(pc), int64(len(check.Expected())))
		return err
	})

	var memberB *member
	check.Run("group_commit_and_resume", 60*time.Second, func(ctx context.Context) error {
		end, err := client.GetOffset(topic, 0, sarama.OffsetNewest)
		if err != nil {
			return err
		}
		a, err := join(group, sarama.ReadUncommitted)
		if err != nil {
			return fmt.Errorf("member A: %w", err)
		}
		got, err := check.ReadN(ctx, a.poll(), check.GroupFirst)
		if err == nil {
			err = check.ExpectRange(got[:check.GroupFirst], 0, check.GroupFirst)
		}
		if err != nil {
			a.close()
			return fmt.Errorf("member A: %w", err)
		}
		sess := a.session()
		sess.MarkOffset(topic, 0, check.GroupFirst, "")
		sess.Commit()
		if err := a.firstError(); err != nil {
			a.close()
			return fmt.Errorf("member A commit: %w", err)
		}
		if err := a.close(); err != nil {
			return fmt.Errorf("member A close: %w", err)
		}
		b, err := join(group, sarama.ReadUncommitted)
		if err != nil {
			return fmt.Errorf("member B: %w", err)
		}
		got, err = check.ReadThrough(ctx, b.poll(), end-1)
		if err == nil {
			err = check.ExpectRange(got, check.GroupFirst, end)
		}
		if err != nil {
			b.close()
			return fmt.Errorf("member B: %w", err)
		}
		memberB = b
		return nil
	})

	check.Run("admin_describe_group", 30*time.Second, func(ctx context.Context) error {
		if memberB == nil {
			return fmt.Errorf("no member to describe (group_commit_and_resume failed)")
		}
		err := check.Poll(ctx, "group Stable with 1 member assigned the topic", 200*time.Millisecond, func() (bool, error) {
			gs, err := admin.DescribeConsumerGroups([]string{group})
			if err != nil {
				return false, err
			}
			if len(gs) != 1 {
				return false, fmt.Errorf("described %d groups", len(gs))
			}
			g := gs[0]
			if g.Err != sarama.ErrNoError {
				return false, g.Err
			}
			if g.State != "Stable" || g.ProtocolType != "consumer" || len(g.Members) != 1 {
				return false, fmt.Errorf("state %q protocol type %q %d members", g.State, g.ProtocolType, len(g.Members))
			}
			for _, m := range g.Members {
				as, err := m.GetMemberAssignment()
				if err != nil {
					return false, fmt.Errorf("member assignment: %w", err)
				}
				if as == nil {
					return false, fmt.Errorf("member %s has no assignment", m.MemberId)
				}
				ps := append([]int32{}, as.Topics[topic]...)
				sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
				if fmt.Sprint(ps) != "[0 1 2]" {
					return false, fmt.Errorf("member assigned %v", as.Topics)
				}
			}
			return true, nil
		})
		if err != nil {
			return err
		}
		offsets, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0}})
		if err != nil {
			return err
		}
		if b := offsets.GetBlock(topic, 0); b == nil || b.Err != sarama.ErrNoError || b.Offset != check.GroupFirst {
			return fmt.Errorf("committed offset of %s/0 is %+v, want %d", topic, b, check.GroupFirst)
		}
		if err := memberB.close(); err != nil {
			return fmt.Errorf("closing the member: %w", err)
		}
		memberB = nil
		return check.Poll(ctx, "group Empty after its member left", 200*time.Millisecond, func() (bool, error) {
			gs, err := admin.DescribeConsumerGroups([]string{group})
			if err != nil {
				return false, err
			}
			if len(gs) != 1 || gs[0].Err != sarama.ErrNoError {
				return false, fmt.Errorf("describe: %+v", gs)
			}
			return gs[0].State == "Empty" && len(gs[0].Members) == 0, fmt.Errorf("state %q, %d members", gs[0].State, len(gs[0].Members))
		})
	})
	if memberB != nil {
		memberB.close()
	}

	check.Run("transactions", 60*time.Second, func(ctx context.Context) error {
		return transactions(ctx)
	})

	check.Run("transactions_read_uncommitted", 30*time.Second, func(ctx context.Context) error {
		return readTxnTopic(ctx, sarama.ReadUncommitted, check.TxnReadUncommitted())
	})

	check.Run("transactions_send_offsets", 60*time.Second, func(ctx context.Context) error {
		return consumeTransformProduce(ctx, client, admin)
	})

	check.Run("admin_delete_topic", 30*time.Second, func(ctx context.Context) error {
		for _, t := range []string{topic, txnTopic, etlTopic} {
			if err := admin.DeleteTopic(t); err != nil {
				return fmt.Errorf("%s: %w", t, err)
			}
		}
		return check.Poll(ctx, "the topic to leave the metadata", 200*time.Millisecond, func() (bool, error) {
			ts, err := admin.ListTopics()
			if err != nil {
				return false, err
			}
			_, still := ts[topic]
			return !still, fmt.Errorf("%s still listed", topic)
		})
	})
}

// member is one consumer-group member running Sarama's Consume loop in the background.
type member struct {
	cg      sarama.ConsumerGroup
	cancel  context.CancelFunc
	done    chan struct{}
	recs    chan *sarama.ConsumerMessage
	errs    chan error
	mu      sync.Mutex
	sess    sarama.ConsumerGroupSession
	joined  chan struct{}
	joinOne sync.Once
}

func join(g string, level sarama.IsolationLevel) (*member, error) {
	c := config()
	c.Consumer.IsolationLevel = level
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.Offsets.AutoCommit.Enable = false
	cg, err := sarama.NewConsumerGroup(addrs, g, c)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{cg: cg, cancel: cancel, done: make(chan struct{}), recs: make(chan *sarama.ConsumerMessage, 1000),
		errs: make(chan error, 100), joined: make(chan struct{})}
	go func() {
		defer close(m.done)
		for i := 0; i < 100 && ctx.Err() == nil; i++ { // a new session after each rebalance
			if err := cg.Consume(ctx, []string{topic}, m); err != nil && ctx.Err() == nil {
				m.errs <- fmt.Errorf("consume: %w", err)
				time.Sleep(200 * time.Millisecond)
			}
		}
	}()
	go func() {
		for err := range cg.Errors() {
			select {
			case m.errs <- err:
			default:
			}
		}
	}()
	return m, nil
}

func (m *member) Setup(s sarama.ConsumerGroupSession) error {
	m.mu.Lock()
	m.sess = s
	m.mu.Unlock()
	m.joinOne.Do(func() { close(m.joined) })
	return nil
}

func (m *member) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (m *member) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case msg, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			select {
			case m.recs <- msg:
			case <-s.Context().Done():
				return nil
			}
		case <-s.Context().Done():
			return nil
		}
	}
}

func (m *member) session() sarama.ConsumerGroupSession {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sess
}

func (m *member) firstError() error {
	select {
	case err := <-m.errs:
		return err
	default:
		return nil
	}
}

func (m *member) pollMessages(ctx context.Context) ([]*sarama.ConsumerMessage, error) {
	var out []*sarama.ConsumerMessage
	wait := time.NewTimer(time.Second)
	defer wait.Stop()
	for {
		if len(out) > 0 {
			select {
			case msg := <-m.recs:
				out = append(out, msg)
				continue
			default:
				return out, nil
			}
		}
		select {
		case msg := <-m.recs:
			out = append(out, msg)
		case err := <-m.errs:
			return out, err
		case <-wait.C:
			return out, nil
		case <-ctx.Done():
			return out, nil
		}
	}
}

func (m *member) poll() check.PollFunc {
	return func(ctx context.Context) ([]check.Record, error) {
		ms, err := m.pollMessages(ctx)
		var out []check.Record
		for _, msg := range ms {
			out = append(out, check.Record{Offset: msg.Offset, Value: string(msg.Value)})
		}
		return out, err
	}
}

// close leaves the group (Sarama's Close sends LeaveGroup) and waits for the loop to end.
func (m *member) close() error {
	m.cancel()
	err := m.cg.Close()
	select {
	case <-m.done:
	case <-time.After(20 * time.Second):
		return fmt.Errorf("the consume loop did not end")
	}
	return err
}

func transactions(ctx context.Context) error {
	c := idempotent(config())
	c.Producer.Transaction.ID = flags.Prefix + "-tx"
	p, err := sarama.NewSyncProducer(addrs, c)
	if err != nil {
		return fmt.Errorf("transactional producer: %w", err)
	}
	defer p.Close()
	round := func(values []string, commit bool) error {
		if err := p.BeginTxn(); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		if err := sendAll(p, msgs(txnTopic, values...)); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
		if commit {
			if err := p.CommitTxn(); err != nil {
				return fmt.Errorf("commit: %w", err)
			}
		} else if err := p.AbortTxn(); err != nil {
			return fmt.Errorf("abort: %w", err)
		}
		return nil
	}
	if err := round(check.TxnCommitted, true); err != nil {
		return fmt.Errorf("committed transaction: %w", err)
	}
	if err := round(check.TxnAborted, false); err != nil {
		return fmt.Errorf("aborted transaction: %w", err)
	}
	if err := round([]string{check.TxnFinal}, true); err != nil {
		return fmt.Errorf("last transaction: %w", err)
	}
	return readTxnTopic(ctx, sarama.ReadCommitted, check.TxnReadCommitted())
}

// readTxnTopic reads the transactions' topic at an isolation level through the last record.
func readTxnTopic(ctx context.Context, level sarama.IsolationLevel, want []string) error {
	c, pc, err := consumePartition(txnTopic, sarama.OffsetOldest, level)
	if err != nil {
		return err
	}
	defer c.Close()
	defer pc.Close()
	got, err := check.ReadValue(ctx, partitionPoll(pc), check.TxnFinal)
	if err != nil {
		return err
	}
	return check.SameValues(check.Values(got), want)
}

// consumeTransformProduce: a member of its own group reads the main topic to its end; one
// transaction writes a record per record read and commits the group's offset with the
// member's generation and member id (AddOffsetsToTxn + TxnOffsetCommit, KIP-447 fencing).
func consumeTransformProduce(ctx context.Context, client sarama.Client, admin sarama.ClusterAdmin) error {
	g := flags.Prefix + "-etl-g"
	end, err := client.GetOffset(topic, 0, sarama.OffsetNewest)
	if err != nil {
		return err
	}
	m, err := join(g, sarama.ReadCommitted)
	if err != nil {
		return err
	}
	defer m.close()
	var in []*sarama.ConsumerMessage
	for len(in) == 0 || in[len(in)-1].Offset < end-1 {
		if ctx.Err() != nil {
			return fmt.Errorf("read %d of %d records", len(in), end)
		}
		ms, err := m.pollMessages(ctx)
		if err != nil {
			return err
		}
		in = append(in, ms...)
	}
	c := idempotent(config())
	c.Producer.Transaction.ID = flags.Prefix + "-etl-tx"
	p, err := sarama.NewSyncProducer(addrs, c)
	if err != nil {
		return fmt.Errorf("transactional producer: %w", err)
	}
	defer p.Close()
	if err := p.BeginTxn(); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	var values []string
	for _, msg := range in {
		values = append(values, "etl-"+string(msg.Value))
	}
	if err := sendAll(p, msgs(etlTopic, values...)); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	last := in[len(in)-1]
	meta := sarama.NewConsumerGroupMetadataFromSession(m.session(), g, nil)
	if err := p.AddMessageToTxnWithGroupMetadata(last, meta, nil); err != nil {
		return fmt.Errorf("add offsets to the transaction: %w", err)
	}
	if err := p.CommitTxn(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	// The offsets become visible once the commit markers are written, which Kafka does after
	// answering EndTxn: wait for them.
	next := last.Offset + 1
	err = check.Poll(ctx, fmt.Sprintf("the group's committed offset to be %d", next), 100*time.Millisecond, func() (bool, error) {
		offsets, err := admin.ListConsumerGroupOffsets(g, map[string][]int32{topic: {0}})
		if err != nil {
			return false, err
		}
		b := offsets.GetBlock(topic, 0)
		if b == nil {
			return false, fmt.Errorf("no block for %s/0", topic)
		}
		return b.Err == sarama.ErrNoError && b.Offset == next, fmt.Errorf("committed offset of %s/0 is %d (err %v)", topic, b.Offset, b.Err)
	})
	if err != nil {
		return err
	}
	rc, pc, err := consumePartition(etlTopic, sarama.OffsetOldest, sarama.ReadCommitted)
	if err != nil {
		return err
	}
	defer rc.Close()
	defer pc.Close()
	got, err := check.ReadN(ctx, partitionPoll(pc), len(values))
	if err != nil {
		return fmt.Errorf("reading the output: %w", err)
	}
	check.Info("consume-transform-produce: %d records in one transaction (generation %d)", len(values), meta.GenerationID)
	return check.SameValues(check.Values(got), values)
}
