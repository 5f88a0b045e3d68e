"""Train database ``football``: leagues, teams, players and matches.

Noise: birth dates as DD/MM/YYYY text, a noisy position column, market values stored as
text, NULL heights and attendances, two foreign keys from matches to teams.
"""

from __future__ import annotations

import datetime as dt
import random

from eval.data.minibird import words as w
from eval.data.minibird.questions import Ctx, intent, lit
from eval.data.minibird.spec import Domain, Table, col

POSITIONS = {
    "Goalkeeper": ("GK", "goalkeeper"),
    "Defender": ("defender", "DEF"),
    "Midfielder": ("midfielder", "Midfield"),
    "Forward": ("forward", "Striker"),
}

TABLES = (
    Table(
        "leagues",
        "league",
        "leagues",
        (
            col("league_id", "INTEGER", "id", "league id", "unique id of the league", pk=True),
            col("league_name", "TEXT", "name", "league name", "name of the league"),
            col("country", "TEXT", "cat", "country", "country of the league"),
        ),
    ),
    Table(
        "teams",
        "team",
        "teams",
        (
            col("team_id", "INTEGER", "id", "team id", "unique id of the team", pk=True),
            col("team_name", "TEXT", "name", "team name", "name of the team"),
            col("league_id", "INTEGER", "fk", "league id", "league the team plays in", fk=("leagues", "league_id")),
            col("founded", "INTEGER", "num", "founding year", "year the club was founded"),
            col("stadium", "TEXT", "text", "stadium", "home stadium"),
            col("capacity", "INTEGER", "num", "stadium capacity", "number of seats in the home stadium"),
        ),
    ),
    Table(
        "players",
        "player",
        "players",
        (
            col("player_id", "INTEGER", "id", "player id", "unique id of the player", pk=True),
            col("player_name", "TEXT", "name", "player name", "full name of the player"),
            col("team_id", "INTEGER", "fk", "team id", "current team", fk=("teams", "team_id")),
            col("position", "TEXT", "cat", "position", "playing position", variants=POSITIONS),
            col("birth_date", "TEXT", "date", "birth date", "date of birth", date_format="dmy"),
            col("height_cm", "INTEGER", "num", "height", "height in centimetres", nullable=True),
            col(
                "mkt_val",
                "TEXT",
                "num",
                "market value",
                "estimated market value in euros",
                textnum=True,
                abbreviated=True,
            ),
        ),
    ),
    Table(
        "matches",
        "match",
        "matches",
        (
            col("match_id", "INTEGER", "id", "match id", "unique id of the match", pk=True),
            col("home_team_id", "INTEGER", "fk", "home team id", "home team", fk=("teams", "team_id")),
            col("away_team_id", "INTEGER", "fk", "away team id", "away team", fk=("teams", "team_id")),
            col("match_date", "TEXT", "date", "match date", "date the match was played", date_format="iso"),
            col("home_goals", "INTEGER", "num", "home goals", "goals scored by the home team"),
            col("away_goals", "INTEGER", "num", "away goals", "goals scored by the away team"),
            col("attendance", "INTEGER", "num", "attendance", "spectators at the match", nullable=True),
        ),
    ),
)


def make_rows(rng: random.Random) -> dict[str, list[tuple]]:
    leagues = [(i + 1, f"{country} Premier Division", country) for i, country in enumerate(w.COUNTRIES[:8])]
    teams = []
    for i, name in enumerate(
        w.unique(rng, 96, lambda r: f"{r.choice(w.CITIES)} {r.choice(('United', 'City', 'Rovers', 'Athletic', 'FC'))}")
    ):
        teams.append(
            (
                i + 1,
                name,
                i % len(leagues) + 1,
                rng.randrange(1870, 2005),
                f"{name.split(' ')[0]} Park",
                rng.randrange(8, 90) * 1000,
            )
        )
    positions = sorted(POSITIONS)
    players = []
    for i, name in enumerate(w.unique(rng, 2200, w.person)):
        born = w.date_between(rng, dt.date(1984, 1, 1), dt.date(2006, 12, 31))
        players.append(
            (
                i + 1,
                name,
                rng.randrange(1, len(teams) + 1),
                w.noisy_pick(rng, w.weighted(rng, positions, (4, 1, 3, 3)), POSITIONS, 0.2),
                w.fmt_date(born, "dmy"),
                w.maybe_null(rng, rng.randrange(165, 201), 0.1),
                str(rng.randrange(1, 400) * 250_000),
            )
        )
    matches = []
    for i in range(1800):
        league = rng.randrange(len(leagues))
        home, away = rng.sample([t for t in range(1, len(teams) + 1) if (t - 1) % len(leagues) == league], 2)
        day = w.date_between(rng, dt.date(2018, 8, 1), dt.date(2023, 5, 31))
        matches.append(
            (
                i + 1,
                home,
                away,
                w.fmt_date(day, "iso"),
                rng.randrange(0, 6),
                rng.randrange(0, 5),
                w.maybe_null(rng, rng.randrange(2, 80) * 1000, 0.1),
            )
        )
    return {"leagues": leagues, "teams": teams, "players": players, "matches": matches}


@intent("challenging")
def home_win_rate(ctx: Ctx):
    team = ctx.choice(
        [r[0] for r in ctx.rows("SELECT team_name FROM teams GROUP BY team_name HAVING COUNT(*) = 1 ORDER BY 1")]
    )
    ctx.hint("a home win means home_goals > away_goals; rate = wins * 100 / home matches", 0.8)
    q = ctx.say(
        ["What percentage of its home matches did {t} win?", "In what percent of home games was {t} victorious?"],
        t=ctx.mention(team),
    )
    sql = (
        "SELECT CAST(SUM(CASE WHEN T1.home_goals > T1.away_goals THEN 1 ELSE 0 END) AS REAL) * 100 / COUNT(*) "
        f"FROM matches AS T1 INNER JOIN teams AS T2 ON T1.home_team_id = T2.team_id WHERE T2.team_name = {lit(team)}"
    )
    return q, ctx.take_evidence(), sql


@intent("moderate")
def players_born_in(ctx: Ctx):
    year = ctx.rng.randrange(1984, 2007)
    ctx.hint("birth_date is stored as text in the format DD/MM/YYYY", 0.9)
    q = ctx.say(["How many players were born in {y}?", "Count the players whose birth year is {y}."], y=year)
    return q, ctx.take_evidence(), f"SELECT COUNT(*) FROM players WHERE SUBSTR(birth_date, 7, 4) = '{year}'"


@intent("simple")
def high_scoring_matches(ctx: Ctx):
    k = ctx.choice([5, 6, 7])
    q = ctx.say(
        ["How many matches had more than {k} goals in total?", "Count the matches with over {k} goals scored."], k=k
    )
    return q, ctx.take_evidence(), f"SELECT COUNT(*) FROM matches WHERE home_goals + away_goals > {k}"


DOMAIN = Domain(
    "football", "train", "football leagues", TABLES, make_rows, (home_win_rate, players_born_in, high_scoring_matches)
)
