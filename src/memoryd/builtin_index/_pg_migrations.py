"""The PostgreSQL schema of the built-in index: numbered migrations recorded in `schema_version`.

Each (agent, workspace) is a tenant of the `memoryd` schema; row-level security limits a role to
the tenants of the agents it was granted (`memoryd.allow_host`). Searches run in SECURITY DEFINER
functions that check the tenant first, because under RLS the planner may not use an index for a
non-leakproof operator such as `@@`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import IndexError_

#: advisory-lock key space: the high 32 bits spell "memd", the low bits name the lock
LOCK_SPACE = 0x6D656D64 << 32
MIGRATION_LOCK = LOCK_SPACE | 0x7FFFFFFF
HNSW_MAX_DIMS = 2000  # pgvector cannot build an HNSW index over wider `vector` columns
_TENANT_TABLES = (
    "tenant_stats meta files chunks pending_vectors chunk_vectors embedding_cache".split()
)
_SCOPE = "tenant_id = any ((select memoryd.visible_tenants())::bigint[])"


def _m004_schema(cur: Any, ext: str) -> None:
    cur.execute(
        f"""
        create table memoryd.tenants (
            id bigint generated always as identity primary key,
            agent_id text not null, workspace text not null,
            state text not null default 'active' check (state in ('active', 'building')),
            created_at timestamptz not null default now()
        );
        create unique index tenants_active on memoryd.tenants (agent_id, workspace)
            where state = 'active';
        create table memoryd.tenant_access (
            role_name name not null, agent_id text not null, primary key (role_name, agent_id)
        );
        create table memoryd.tenant_stats (
            tenant_id bigint primary key references memoryd.tenants (id) on delete cascade,
            version bigint not null default 0, chunk_count bigint not null default 0,
            token_total bigint not null default 0, char_total bigint not null default 0,
            vector_count bigint not null default 0, vec_dims integer
        );
        create table memoryd.meta (
            tenant_id bigint not null references memoryd.tenants (id) on delete cascade,
            key text not null, value text not null, primary key (tenant_id, key)
        );
        create table memoryd.files (
            tenant_id bigint not null references memoryd.tenants (id) on delete cascade,
            path text not null, abs_path text not null, source text not null, hash text not null,
            mtime double precision not null, size bigint not null, primary key (tenant_id, path)
        );
        -- one partition per tenant (memoryd.attach_tenant), so a search costs what the tenant's own
        -- indexes cost and an HNSW build locks only its partition; no foreign keys (a cascade
        -- would probe every partition): the store deletes a chunk's vector and pending mark.
        create sequence memoryd.chunks_id_seq;
        create table memoryd.chunks (
            id bigint not null default nextval('memoryd.chunks_id_seq'), tenant_id bigint not null,
            path text not null, source text not null,
            start_line integer not null, end_line integer not null,
            hash text not null, text text not null, tokens integer not null,
            doc_len integer not null, tsv tsvector not null, tf jsonb not null,
            primary key (tenant_id, id)
        ) partition by list (tenant_id);
        alter sequence memoryd.chunks_id_seq owned by memoryd.chunks.id;
        -- tf is read for every keyword hit: keep it in the row, uncompressed when it fits
        alter table memoryd.chunks alter column tf set storage main;
        create index chunks_by_path on memoryd.chunks (tenant_id, path, start_line);
        -- a small pending list: every search scans it, and bulk syncs fill it fast
        create index chunks_fts on memoryd.chunks using gin (tsv)
            with (gin_pending_list_limit = 512);
        create index chunks_trgm on memoryd.chunks using gin (text gin_trgm_ops)
            with (gin_pending_list_limit = 512);
        -- chunks waiting for a vector: a table of their own, because flipping a flag in
        -- `chunks` would re-insert the row into both GIN indexes
        create table memoryd.pending_vectors (
            tenant_id bigint not null references memoryd.tenants (id) on delete cascade,
            chunk_id bigint not null, primary key (tenant_id, chunk_id)
        );
        create table memoryd.chunk_vectors (
            tenant_id bigint not null, chunk_id bigint not null, dims integer not null,
            embedding vector, primary key (tenant_id, chunk_id)
        ) partition by list (tenant_id);
        create table memoryd.embedding_cache (
            tenant_id bigint not null references memoryd.tenants (id) on delete cascade,
            provider text not null, model text not null, fingerprint text not null,
            hash text not null, dims integer not null, vector bytea not null,
            used_at double precision not null,
            primary key (tenant_id, provider, model, fingerprint, hash)
        );
        create index embedding_cache_lru on memoryd.embedding_cache (tenant_id, used_at);

        -- FTS5's `porter unicode61 remove_diacritics 2`: fold accents, stem, keep every word
        create text search dictionary memoryd.english_stem (template = snowball, language = english);
        create text search configuration memoryd.fts (copy = pg_catalog.simple);
        alter text search configuration memoryd.fts
            alter mapping for asciiword, word, numword, asciihword, hword, numhword,
                              hword_asciipart, hword_part, hword_numpart
            with {ext.split(",")[0]}.unaccent, memoryd.english_stem;

        create function memoryd.tf_map(tsvector) returns jsonb
            language sql immutable strict parallel safe
            set search_path = pg_catalog
            return (select coalesce(jsonb_object_agg(lexeme, cardinality(positions)), '{{}}')
                    from unnest($1));
        create aggregate memoryd.tsquery_or_all(tsquery) (sfunc = tsquery_or, stype = tsquery);

        -- who may reach which tenant, and the tenant lifecycle (open, rebuild, publish)
        create function memoryd.is_admin() returns boolean
            language sql stable security definer set search_path = pg_catalog, pg_temp
            return pg_has_role(session_user,
                (select c.relowner from pg_class c where c.oid = 'memoryd.tenants'::regclass),
                'MEMBER');

        create function memoryd.can_reach_agent(p_agent text) returns boolean
            language sql stable security definer set search_path = pg_catalog, pg_temp
            return memoryd.is_admin() or exists (
                select 1 from memoryd.tenant_access a join pg_roles r on r.rolname = a.role_name
                where a.agent_id in (p_agent, '*') and pg_has_role(session_user, r.oid, 'MEMBER'));

        create function memoryd.visible_tenants() returns bigint[]
            language sql stable security definer set search_path = pg_catalog, pg_temp
            return (
                select coalesce(array_agg(t.id), '{{}}') from memoryd.tenants t
                where memoryd.is_admin() or exists (
                    select 1 from memoryd.tenant_access a join pg_roles r on r.rolname = a.role_name
                    where a.agent_id in (t.agent_id, '*')
                      and pg_has_role(session_user, r.oid, 'MEMBER')));

        create function memoryd.check_tenant(p_tenant bigint) returns void
            language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
        begin
            if not (p_tenant = any (memoryd.visible_tenants())) then
                raise exception 'memoryd tenant % is not visible to role %', p_tenant, session_user
                    using errcode = 'insufficient_privilege';
            end if;
        end $$;

        create function memoryd.tenant_lock(p_tenant bigint) returns bigint
            language sql immutable parallel safe set search_path = pg_catalog
            return {LOCK_SPACE} | (p_tenant & 2147483647);

        -- ATTACH PARTITION takes a lock on the parent that lets reads and writes go on (a
        -- CREATE TABLE ... PARTITION OF would queue every tenant behind a long transaction)
        create function memoryd.attach_tenant(p_tenant bigint) returns void
            language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
        declare parent text;
        begin
            perform memoryd.check_tenant(p_tenant);
            foreach parent in array array['chunks', 'chunk_vectors'] loop
                execute format('create table memoryd.%I (like memoryd.%I including defaults '
                               'including storage)', parent || '_t' || p_tenant, parent);
                execute format('alter table memoryd.%I attach partition memoryd.%I '
                               'for values in (%s)', parent, parent || '_t' || p_tenant, p_tenant);
            end loop;
        end $$;

        -- A retired tenant's partition is emptied at once (a lock on that partition only) and
        -- dropped by memoryd.drop_retired_partitions(), which the owner runs at a quiet time.
        create function memoryd.retire_tenant(p_tenant bigint) returns void
            language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
        declare parent text;
        begin
            perform memoryd.check_tenant(p_tenant);
            foreach parent in array array['chunks', 'chunk_vectors'] loop
                if to_regclass(format('memoryd.%I', parent || '_t' || p_tenant)) is not null then
                    execute format('truncate memoryd.%I', parent || '_t' || p_tenant);
                end if;
            end loop;
            delete from memoryd.tenants where id = p_tenant;
        end $$;

        create function memoryd.drop_retired_partitions() returns integer
            language plpgsql set search_path = pg_catalog, pg_temp as $$
        declare r record; n integer := 0;
        begin
            for r in select c.relname, substring(c.relname from '_t([0-9]+)$')::bigint as tenant
                     from pg_inherits i join pg_class c on c.oid = i.inhrelid
                     where i.inhparent in ('memoryd.chunks'::regclass,
                                           'memoryd.chunk_vectors'::regclass) loop
                if not exists (select 1 from memoryd.tenants where id = r.tenant) then
                    execute format('drop table memoryd.%I', r.relname);
                    n := n + 1;
                end if;
            end loop;
            return n;
        end $$;

        create function memoryd.open_tenant(p_agent text, p_workspace text) returns bigint
            language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
        declare v bigint;
        begin
            if not memoryd.can_reach_agent(p_agent) then
                raise exception 'role % may not use memoryd agent %', session_user, p_agent
                    using errcode = 'insufficient_privilege';
            end if;
            -- read first: an insert would wait on a writer's open transaction that updated
            -- the tenant's stats row (its unique check waits for that row's fate)
            select id into v from memoryd.tenants
            where agent_id = p_agent and workspace = p_workspace and state = 'active';
            if v is not null then
                return v;
            end if;
            insert into memoryd.tenants (agent_id, workspace) values (p_agent, p_workspace)
                on conflict (agent_id, workspace) where state = 'active' do nothing
                returning id into v;
            if v is null then
                select id into v from memoryd.tenants
                where agent_id = p_agent and workspace = p_workspace and state = 'active';
            else
                insert into memoryd.tenant_stats (tenant_id) values (v);
                perform memoryd.attach_tenant(v);
            end if;
            return v;
        end $$;

        create function memoryd.active_tenant(p_agent text, p_workspace text) returns bigint
            language sql stable security definer set search_path = pg_catalog, pg_temp
            return (select t.id from memoryd.tenants t
                    where t.agent_id = p_agent and t.workspace = p_workspace
                      and t.state = 'active' and memoryd.can_reach_agent(p_agent));

        -- A rebuild fills a 'building' tenant whose advisory lock its builder holds throughout:
        -- a build whose lock is free belongs to a dead process and is dropped here.
        create function memoryd.begin_rebuild(p_tenant bigint) returns bigint
            language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
        declare a text; w text; v bigint; stale bigint;
        begin
            perform memoryd.check_tenant(p_tenant);
            select agent_id, workspace into a, w from memoryd.tenants where id = p_tenant;
            for stale in select id from memoryd.tenants
                         where agent_id = a and workspace = w and state = 'building' loop
                if pg_try_advisory_xact_lock(memoryd.tenant_lock(stale)) then
                    perform memoryd.retire_tenant(stale);
                end if;
            end loop;
            insert into memoryd.tenants (agent_id, workspace, state) values (a, w, 'building')
                returning id into v;
            insert into memoryd.tenant_stats (tenant_id) values (v);
            perform memoryd.attach_tenant(v);
            insert into memoryd.embedding_cache
                select v, provider, model, fingerprint, hash, dims, vector, used_at
                from memoryd.embedding_cache where tenant_id = p_tenant;
            return v;
        end $$;

        create function memoryd.publish_rebuild(p_old bigint, p_new bigint) returns void
            language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
        begin
            perform memoryd.check_tenant(p_old);
            perform memoryd.check_tenant(p_new);
            if not exists (select 1 from memoryd.tenants n join memoryd.tenants o
                           on o.agent_id = n.agent_id and o.workspace = n.workspace
                           where n.id = p_new and n.state = 'building'
                             and o.id = p_old and o.state = 'active') then
                raise exception 'memoryd tenant % is not a rebuild of %', p_new, p_old
                    using errcode = 'invalid_parameter_value';
            end if;
            perform memoryd.retire_tenant(p_old);
            update memoryd.tenants set state = 'active' where id = p_new;
        end $$;

        create function memoryd.discard_rebuild(p_new bigint) returns void
            language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
        begin
            perform memoryd.check_tenant(p_new);
            if exists (select 1 from memoryd.tenants where id = p_new and state = 'building') then
                perform memoryd.retire_tenant(p_new);
            end if;
        end $$;

        -- The HNSW index of one tenant's partition: its build locks out that tenant's writes only.
        create function memoryd.ensure_tenant_vector_index(p_tenant bigint, p_dims integer)
            returns boolean
            language plpgsql security definer set search_path = memoryd, {ext}, pg_catalog, pg_temp
            as $$
        begin
            perform memoryd.check_tenant(p_tenant);
            if p_dims < 1 or p_dims > {HNSW_MAX_DIMS} then
                return false;
            end if;
            execute format(
                'create index if not exists %I on memoryd.%I '
                'using hnsw ((embedding::vector(%s)) vector_cosine_ops) '
                'where dims = %s and embedding is not null',
                'chunk_vectors_t' || p_tenant || '_hnsw_' || p_dims,
                'chunk_vectors_t' || p_tenant, p_dims, p_dims);
            return true;
        end $$;

        -- FTS5's bm25() (idf at least 1e-6, k1 = 1.2, b = 0.75, length in tokens); a phrase
        -- term (CJK run, "don't") counts as often as its rarest word.
        create function memoryd.keyword_hits(p_tenant bigint, p_terms text[], p_limit integer)
            returns table (chunk_id bigint, score double precision)
            language plpgsql stable security definer set plan_cache_mode = force_custom_plan
            set search_path = memoryd, {ext}, pg_catalog, pg_temp as $$
        declare n double precision; avgdl double precision; v_q tsquery;
        begin
            perform memoryd.check_tenant(p_tenant);
            select s.chunk_count, s.token_total::double precision / greatest(s.chunk_count, 1)
                into n, avgdl from memoryd.tenant_stats s where s.tenant_id = p_tenant;
            if n is null or n = 0 then
                return;
            end if;
            avgdl := greatest(avgdl, 1);
            select memoryd.tsquery_or_all(x.q) into v_q from (
                select phraseto_tsquery('memoryd.fts', t) as q from unnest(p_terms) t) x
                where numnode(x.q) > 0;
            if v_q is null then
                return;
            end if;
            -- MATERIALIZED: each step once (inlined, the terms' lexemes were recomputed per row)
            return query
            with t as materialized (
                select x.i, x.lx, x.lx[1] as l1, cardinality(x.lx) as nl from (
                    select u.i, array(select distinct v.lexeme
                                      from unnest(to_tsvector('memoryd.fts', u.term)) v) as lx
                    from unnest(p_terms) with ordinality as u (term, i)) x
                where cardinality(x.lx) > 0
            ), m as materialized (
                select c.id, c.doc_len, c.tf from memoryd.chunks c
                where c.tenant_id = p_tenant and c.tsv @@ v_q
            ), h as materialized (
                -- one lookup for a one-word term (nearly all of them), all words for a phrase
                select * from (
                    select m.id, m.doc_len, t.i,
                           case when t.nl = 1 then (m.tf ->> t.l1)::double precision
                                when m.tf ?& t.lx then (select min((m.tf ->> l)::double precision)
                                                        from unnest(t.lx) l)
                           end as f
                    from m cross join t) x
                where x.f is not null
            ), d as (
                select h.i, count(*)::double precision as df from h group by h.i
            )
            select h.id, sum(
                greatest(ln((n - d.df + 0.5) / (d.df + 0.5)), 1e-6)
                * (h.f * 2.2) / (h.f + 1.2 * (0.25 + 0.75 * h.doc_len / avgdl)))::double precision
            from h join d using (i)
            group by h.id
            order by 2 desc, h.id
            limit p_limit;
        end $$;

        -- FTS5's trigram table: case-insensitive substrings through pg_trgm, bm25 over
        -- occurrences with the document length in characters.
        create function memoryd.substring_hits(p_tenant bigint, p_terms text[], p_limit integer)
            returns table (chunk_id bigint, score double precision)
            language plpgsql stable security definer set plan_cache_mode = force_custom_plan
            set search_path = memoryd, {ext}, pg_catalog, pg_temp as $$
        declare n double precision; avgdl double precision;
        begin
            perform memoryd.check_tenant(p_tenant);
            select s.chunk_count, s.char_total::double precision / greatest(s.chunk_count, 1)
                into n, avgdl from memoryd.tenant_stats s where s.tenant_id = p_tenant;
            if n is null or n = 0 then
                return;
            end if;
            avgdl := greatest(avgdl, 1);
            return query
            with t as materialized (
                select u.i, lower(u.term) as term,
                       '%' || replace(replace(replace(lower(u.term), '\\', '\\\\'), '%', '\\%'),
                                      '_', '\\_') || '%' as pat
                from unnest(p_terms) with ordinality as u (term, i)
                where char_length(u.term) >= 3
            ), h as materialized (
                select c.id, char_length(c.text) as dl, t.i,
                       ((char_length(lower(c.text))
                         - char_length(replace(lower(c.text), t.term, '')))
                        / char_length(t.term))::double precision as f
                from t cross join lateral (
                    select x.id, x.text from memoryd.chunks x
                    where x.tenant_id = p_tenant and x.text ilike t.pat) c
            ), d as (
                select h.i, count(*)::double precision as df from h group by h.i
            )
            select h.id, sum(
                greatest(ln((n - d.df + 0.5) / (d.df + 0.5)), 1e-6)
                * (h.f * 2.2) / (h.f + 1.2 * (0.25 + 0.75 * h.dl / avgdl)))::double precision
            from h join d using (i)
            where h.f > 0
            group by h.id
            order by 2 desc, h.id
            limit p_limit;
        end $$;

        -- Cosine KNN in one tenant's partition, exact or by its HNSW index (the tenant id is
        -- written into that query so that the planner picks the partition and its index).
        create function memoryd.vector_engine(p_tenant bigint, p_dims integer,
                                              p_exact_max bigint) returns text
            language sql stable security definer set search_path = pg_catalog, pg_temp
            return case
                when (select s.vector_count from memoryd.tenant_stats s
                      where s.tenant_id = p_tenant) > p_exact_max
                 and to_regclass(format('memoryd.%I',
                         'chunk_vectors_t' || p_tenant || '_hnsw_' || p_dims)) is not null
                then 'pgvector-hnsw' else 'pgvector-exact' end;

        -- one round trip: the engine is chosen here (memoryd.vector_engine)
        create function memoryd.vector_hits(p_tenant bigint, p_query vector, p_limit integer,
                                            p_exact_max bigint)
            returns table (chunk_id bigint, similarity double precision)
            language plpgsql volatile security definer set plan_cache_mode = force_custom_plan
            set search_path = memoryd, {ext}, pg_catalog, pg_temp as $$
        declare d integer := vector_dims(p_query);
        begin
            perform memoryd.check_tenant(p_tenant);
            if memoryd.vector_engine(p_tenant, d, p_exact_max) = 'pgvector-exact' then
                return query
                select v.chunk_id, (1 - (v.embedding <=> p_query))::double precision
                from memoryd.chunk_vectors v
                where v.tenant_id = p_tenant and v.dims = d and v.embedding is not null
                order by v.embedding <=> p_query, v.chunk_id
                limit p_limit;
                return;
            end if;
            perform set_config('hnsw.ef_search', greatest(40, p_limit * 2)::text, true);
            return query execute format(
                'select chunk_id, (1 - (embedding::vector(%1$s) <=> $1::vector(%1$s)))::float8 '
                'from memoryd.chunk_vectors where tenant_id = %2$s and dims = %1$s '
                'and embedding is not null '
                'order by embedding::vector(%1$s) <=> $1::vector(%1$s) limit $2',
                d, p_tenant) using p_query, p_limit;
        end $$;
        """
    )
    # row-level security on every tenant table
    statements = [
        f"alter table memoryd.{t} enable row level security" for t in ("tenants", "tenant_access")
    ]
    for t in _TENANT_TABLES:
        statements.append(f"alter table memoryd.{t} enable row level security")
        statements.append(
            f"create policy tenant_scope on memoryd.{t} using ({_SCOPE}) with check ({_SCOPE})"
        )
    statements += [
        "revoke all on schema memoryd from public",
        "revoke execute on all functions in schema memoryd from public",
    ]
    # the owner grants a host role its agents; RLS keeps every other tenant out of its reach
    tables = ", ".join(f"memoryd.{t}" for t in _TENANT_TABLES)
    allow = f"""
        create function memoryd.allow_host(p_role name, p_agent text) returns void
            language plpgsql set search_path = pg_catalog, pg_temp as $$
        begin
            execute format('grant usage on schema memoryd to %I', p_role);
            execute format('grant select, insert, update, delete on {tables} to %I', p_role);
            execute format('grant usage on sequence memoryd.chunks_id_seq to %I', p_role);
            execute format('grant select on memoryd.schema_version to %I', p_role);
            execute format('grant execute on all functions in schema memoryd to %I', p_role);
            execute format('revoke execute on function memoryd.allow_host(name, text), '
                           'memoryd.deny_host(name, text), memoryd.drop_retired_partitions(), '
                           'memoryd.attach_tenant(bigint), memoryd.retire_tenant(bigint) '
                           'from %I', p_role);
            insert into memoryd.tenant_access (role_name, agent_id) values (p_role, p_agent)
                on conflict do nothing;
        end $$
        """
    deny = """
        create function memoryd.deny_host(p_role name, p_agent text) returns void
            language sql set search_path = pg_catalog, pg_temp
            begin atomic
                delete from memoryd.tenant_access where role_name = p_role and agent_id = p_agent;
            end
        """
    statements += [allow, deny]
    statements.append(
        "revoke execute on function memoryd.allow_host(name, text), "
        "memoryd.deny_host(name, text), memoryd.drop_retired_partitions() from public"
    )
    for statement in statements:
        cur.execute(statement)


#: (version, name, apply(cursor, quoted extension schemas)), applied once each, in order. The
#: first is 4: development builds before 0.1.0 created the same schema in four steps, so a
#: database they completed is current (one they left part-way is refused, see `check_version`).
MIGRATIONS: tuple[tuple[int, str, Callable[[Any, str], None]], ...] = (
    (4, "m004_schema", _m004_schema),
)
LATEST = MIGRATIONS[-1][0]


def extension_schemas(cur: Any) -> str:
    """The schemas holding vector, pg_trgm and unaccent, quoted, for a `search_path` (unaccent's first)."""
    cur.execute(
        "select e.extname, quote_ident(n.nspname) from pg_extension e "
        "join pg_namespace n on n.oid = e.extnamespace "
        "where e.extname in ('unaccent', 'vector', 'pg_trgm')"
    )
    found = dict(cur.fetchall())
    ordered = [found[n] for n in ("unaccent", "vector", "pg_trgm") if n in found]
    return ",".join(dict.fromkeys(ordered)) or "public"


def current_version(cur: Any) -> int:
    """The applied schema version (0 when memoryd's schema is absent)."""
    cur.execute("select to_regclass('memoryd.schema_version') is not null")
    if not cur.fetchone()[0]:
        return 0
    cur.execute("select coalesce(max(version), 0) from memoryd.schema_version")
    return int(cur.fetchone()[0])


def check_version(version: int, where: str) -> None:
    """Raise an `IndexError_` saying what to do when migrations cannot bring `version` to LATEST
    (those below the first one are a development build's steps, not a release's)."""
    if 0 < version < MIGRATIONS[0][0]:
        raise IndexError_(
            f"memoryd's schema in {where} is at version {version}, left by a development build "
            "before 0.1.0: drop it (drop schema memoryd cascade) or recreate the database"
        )


def migrate(conn: Any, where: str) -> list[str]:
    """Apply the pending migrations through `conn` (autocommit) to the database `where` names, in
    order; the names applied, or an `IndexError_` naming what the role may not create."""
    import psycopg

    with conn.cursor() as cur:
        try:
            version = current_version(cur)
        except psycopg.Error as err:
            raise IndexError_(f"cannot read memoryd's schema version: {first_line(err)}") from None
        check_version(version, where)
        if version >= LATEST:
            return []
        applied: list[str] = []
        cur.execute("select pg_advisory_lock(%s)", (MIGRATION_LOCK,))
        try:
            step = "create the memoryd schema"
            try:
                with conn.transaction():
                    cur.execute("create schema if not exists memoryd")
                    cur.execute(
                        "create table if not exists memoryd.schema_version ("
                        "version integer primary key, name text not null, "
                        "applied_at timestamptz not null default now())"
                    )
                    # pg_trgm and unaccent are trusted contrib extensions; pgvector needs a
                    # superuser (or a hosted service's admin role) to create it once
                    for name in ("vector", "pg_trgm", "unaccent"):
                        step = f"create extension {name}"
                        cur.execute(f"create extension if not exists {name}")
                ext = extension_schemas(cur)
                done = current_version(cur)
                for version, name, apply in MIGRATIONS:
                    if version <= done:
                        continue
                    step = f"apply migration {name}"
                    with conn.transaction():
                        apply(cur, ext)
                        cur.execute(
                            "insert into memoryd.schema_version (version, name) values (%s, %s)",
                            (version, name),
                        )
                    applied.append(name)
            except psycopg.Error as err:
                raise IndexError_(
                    f"cannot {step} (schema at version {current_version(cur)}, memoryd needs "
                    f"{LATEST}): {first_line(err)}; run the migrations once as the database "
                    "owner (a superuser must create the vector extension)"
                ) from None
        finally:
            cur.execute("select pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
    return applied


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
