-- +goose Up

-- idem_keys holds one record per request key (see package store). The
-- fixed-width columns come first, widest first, so that no alignment padding
-- is wasted between them; the variable-length ones follow. Keys and owners
-- are bytea because both are opaque byte strings, not text.
--
-- fillfactor stays at its default, 100. Complete rewrites every record
-- moments after Claim inserted it and changes expires_at, which is indexed,
-- so that update is never HOT and space kept free for it on the insert's
-- page does not help; measured with BenchmarkDiskPerRecord, the heap took
-- 201 bytes per completed record at 100, 374 at 90 and 432 at 80. (Release,
-- MarkUnknown and Extend change no indexed column and are HOT updates when
-- their page has room.)
CREATE TABLE idem_keys (
    epoch       bigint      NOT NULL,
    expires_at  timestamptz NOT NULL,
    lease_until timestamptz,          -- NULL unless state = 1
    state       smallint    NOT NULL, -- 1 processing, 2 done, 3 released
    unknown     boolean     NOT NULL,
    key         bytea       NOT NULL,
    fingerprint bytea       NOT NULL,
    owner       bytea       NOT NULL,
    response    bytea,                -- set only when state = 2
    CONSTRAINT idem_keys_pkey PRIMARY KEY (key),
    CONSTRAINT idem_keys_state CHECK (state IN (1, 2, 3))
);

-- Sweep finds the records past expires_at through this index.
CREATE INDEX idem_keys_expires_at ON idem_keys (expires_at);

-- +goose Down

DROP TABLE idem_keys;
