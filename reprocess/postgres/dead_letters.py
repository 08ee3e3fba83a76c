"""SQL for the dead letters a run's stage holds: storing them, telling the ones already open
apart, resolving the ones that parse now, and whose they are (``reprocess.dead_letters``).

A stage row and a dead letter are the same record when their (topic, partition, offset) are:
:func:`dead_letter_of` is that join, the only one between a stage and the dead letters. Values are
bound; a stage's identifier comes from :func:`reprocess.postgres.stage.stage_identifier`.
"""

from __future__ import annotations

from typing import Final

from psycopg2 import sql
from sqlalchemy import Connection, text

from reprocess.core.runs import RunMode
from reprocess.core.spec import PipelineSpec
from reprocess.core.stage_rows import DEAD
from reprocess.core.stages import WriteTarget

# A swap's: the live dead letters inside the rebuilt ranges that the rebuild did not find dead are
# resolved by it; the rebuild's own become the pipeline's (a resolved one that fails again is
# reopened, as dead_letters_sql does); then they are forgotten.
_RESOLVE_LIVE: Final = text(
    "UPDATE reprocess.dead_letters d SET resolved_run_id = :run_id, resolved_at = now() FROM reprocess.run_ranges r "
    "WHERE r.run_id = :run_id AND d.pipeline = :pipeline AND d.resolved_run_id IS NULL AND d.topic = r.topic "
    'AND d.partition = r.partition AND d."offset" >= r.start_offset AND d."offset" < r.end_offset '
    "AND NOT EXISTS (SELECT 1 FROM reprocess.dead_letters s WHERE s.pipeline = :owner AND s.topic = d.topic "
    'AND s.partition = d.partition AND s."offset" = d."offset")'
)
_MOVE: Final = text(
    'INSERT INTO reprocess.dead_letters (pipeline, topic, partition, "offset", run_id, key, value, error, '
    'kafka_timestamp) SELECT :pipeline, topic, partition, "offset", run_id, key, value, error, kafka_timestamp '
    'FROM reprocess.dead_letters WHERE pipeline = :owner ON CONFLICT (pipeline, topic, partition, "offset") '
    "DO UPDATE SET run_id = EXCLUDED.run_id, error = EXCLUDED.error, resolved_run_id = NULL, resolved_at = NULL "
    "WHERE reprocess.dead_letters.resolved_run_id IS NOT NULL"
)
_FORGET: Final = text("DELETE FROM reprocess.dead_letters WHERE pipeline = :owner")


def dead_letters_owner(spec: PipelineSpec, mode: RunMode) -> str:
    """The ``pipeline`` value of the dead letters a run writes: a rebuild's are kept apart (under
    ``<pipeline>/rebuild``, never a pipeline name) until its swap moves them to the pipeline, so
    a rebuild that is never swapped in leaves the live dead letters as they were."""
    return (WriteTarget.shadow(spec) if mode is RunMode.REBUILD else WriteTarget.live(spec)).dead_letters_owner


def forget_dead_letters(conn: Connection, owner: str) -> None:
    """Drop ``owner``'s dead letters (a shadow's, when a new rebuild starts or its swap took them)."""
    conn.execute(_FORGET, {"owner": owner})


def adopt_dead_letters(conn: Connection, pipeline: str, owner: str, run_id: str) -> None:
    """At rebuild ``run_id``'s swap: resolve ``pipeline``'s dead letters it read and did not find
    dead, make ``owner``'s (the shadow's) the pipeline's, and forget them under ``owner``."""
    params = {"pipeline": pipeline, "owner": owner, "run_id": run_id}
    conn.execute(_RESOLVE_LIVE, params)
    conn.execute(_MOVE, params)
    forget_dead_letters(conn, owner)


def dead_letter_of(dead_letter: str, stage_row: str) -> sql.Composed:
    """The join condition: the dead letter aliased ``dead_letter`` holds the record that the stage
    row aliased ``stage_row`` staged. It does not scope the dead letters to a pipeline (an owner,
    :func:`dead_letters_owner`): each caller does."""
    return sql.SQL(
        '{d}.topic = {s}._kafka_topic AND {d}.partition = {s}._kafka_partition AND {d}."offset" = {s}._kafka_offset'
    ).format(d=sql.Identifier(dead_letter), s=sql.Identifier(stage_row))


def dead_letters_sql(stage: sql.Composable) -> sql.Composed:
    """Stage dead rows → ``reprocess.dead_letters``; binds ``pipeline`` and ``run_id``."""
    return sql.SQL(
        "INSERT INTO reprocess.dead_letters "
        '(pipeline, topic, partition, "offset", run_id, key, value, error, kafka_timestamp) '
        "SELECT %(pipeline)s, _kafka_topic, _kafka_partition, _kafka_offset, %(run_id)s, "
        "decode(_raw_key, 'hex'), decode(_raw_value, 'hex'), _error, _kafka_timestamp "
        "FROM {stage} WHERE _kind = {dead} "
        # A record that fails again keeps its first dead letter; one that had been resolved and
        # fails again (a spec regression) is reopened with this run's error.
        'ON CONFLICT (pipeline, topic, partition, "offset") DO UPDATE SET run_id = EXCLUDED.run_id, '
        "error = EXCLUDED.error, resolved_run_id = NULL, resolved_at = NULL "
        "WHERE reprocess.dead_letters.resolved_run_id IS NOT NULL"
    ).format(stage=stage, dead=sql.Literal(DEAD))


def known_dead_letters_sql(stage: sql.Composable, *, tombstones_dead: bool) -> sql.Composed:
    """Two counts of the stage's dead rows: those already open dead letters (a replay or a redrive
    read them again and they still fail: not new), and the new ones the spec itself makes, a
    tombstone kept by ``tombstones: dead_letter`` (``tombstones_dead``; a null value, so a NULL
    ``_raw_value``): the dead-letter ratio counts neither. Binds ``pipeline``."""
    by_rule = sql.SQL("d.pipeline IS NULL AND s._raw_value IS NULL") if tombstones_dead else sql.SQL("false")
    return sql.SQL(
        "SELECT count(d.pipeline), count(*) FILTER (WHERE {by_rule}) FROM {stage} s "
        "LEFT JOIN reprocess.dead_letters d ON d.pipeline = %(pipeline)s AND {same_record} "
        "AND d.resolved_run_id IS NULL WHERE s._kind = {dead}"
    ).format(stage=stage, same_record=dead_letter_of("d", "s"), dead=sql.Literal(DEAD), by_rule=by_rule)


def resolve_dead_letters_sql(stage: sql.Composable) -> sql.Composed:
    """Open dead letters inside the run's ranges whose record is not dead in this run's stage:
    the record was read again and now parses (a redrive). They are kept, marked with the run.
    Binds ``pipeline`` and ``run_id``."""
    return sql.SQL(
        "UPDATE reprocess.dead_letters d SET resolved_run_id = %(run_id)s, resolved_at = now() "
        "FROM reprocess.run_ranges r "
        "WHERE r.run_id = %(run_id)s AND d.pipeline = %(pipeline)s AND d.resolved_run_id IS NULL "
        'AND d.topic = r.topic AND d.partition = r.partition AND d."offset" >= r.start_offset '
        'AND d."offset" < r.end_offset AND NOT EXISTS (SELECT 1 FROM {stage} s WHERE s._kind = {dead} '
        "AND {same_record})"
    ).format(stage=stage, dead=sql.Literal(DEAD), same_record=dead_letter_of("d", "s"))
