-- The example service's tables: its own state (accounts) and the outbox it writes its events
-- to in the same transaction. `sluice outbox --table outbox` relays the outbox (Debezium's
-- outbox layout) to Sluice: aggregatetype names the topic (after --topic-prefix), aggregateid
-- is the record key, type the header `type`, payload the value, id the header `id`.
--
-- PostgreSQL needs wal_level = logical (the relay reads the table through logical replication).

CREATE TABLE accounts (
    id         text PRIMARY KEY,
    version    int NOT NULL,          -- 1 when created, +1 on each change (under the row lock)
    balance    bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE outbox (
    id            uuid PRIMARY KEY,   -- the event's id: header `id` of the record
    aggregatetype text NOT NULL,      -- 'account': the topic is PREFIX || 'account'
    aggregateid   text NOT NULL,      -- the account's id: the record key (one partition per key)
    type          text NOT NULL,      -- 'created' or 'changed': header `type`
    payload       jsonb NOT NULL,     -- the account as of the event: the record value (JSON text)
    created_at    timestamptz NOT NULL DEFAULT now()
);
