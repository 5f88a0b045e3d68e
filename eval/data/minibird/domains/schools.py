"""Train database ``schools``: districts, schools, teachers and test scores.

Noise: free-meal eligibility as a 0-1 fraction beside proficiency as 0-100, NULL
enrollment, a noisy subject column, an abbreviated rate column.
"""

from __future__ import annotations

import datetime as dt
import random

from eval.data.minibird import words as w
from eval.data.minibird.questions import Ctx, intent, lit
from eval.data.minibird.spec import Domain, Table, col

SUBJECTS = {
    "Mathematics": ("Math", "mathematics"),
    "English": ("english", "ENGLISH"),
    "Science": ("science",),
    "History": ("history",),
    "Art": ("art", "Arts"),
}
TYPES = ("Elementary", "Middle", "High", "Charter")
REGIONS = ("North", "South", "East", "West", "Central")

TABLES = (
    Table(
        "districts",
        "district",
        "districts",
        (
            col("district_id", "INTEGER", "id", "district id", "unique id of the district", pk=True),
            col("district_name", "TEXT", "name", "district name", "name of the school district"),
            col("county", "TEXT", "cat", "county", "county of the district"),
            col("region", "TEXT", "cat", "region", "region of the state"),
        ),
    ),
    Table(
        "schools",
        "school",
        "schools",
        (
            col("school_id", "INTEGER", "id", "school id", "unique id of the school", pk=True),
            col("school_name", "TEXT", "name", "school name", "name of the school"),
            col(
                "district_id", "INTEGER", "fk", "district id", "district of the school", fk=("districts", "district_id")
            ),
            col("school_type", "TEXT", "cat", "school type", "level or kind of school"),
            col("founded_year", "INTEGER", "num", "founding year", "year the school opened"),
            col("enrollment", "INTEGER", "num", "enrollment", "number of enrolled students", nullable=True),
            col(
                "frpm_rate",
                "REAL",
                "num",
                "free meal rate",
                "share of students eligible for free or reduced-price meals",
                pct="frac",
                abbreviated=True,
            ),
        ),
    ),
    Table(
        "teachers",
        "teacher",
        "teachers",
        (
            col("teacher_id", "INTEGER", "id", "teacher id", "unique id of the teacher", pk=True),
            col("full_name", "TEXT", "name", "name", "full name of the teacher"),
            col(
                "school_id", "INTEGER", "fk", "school id", "school where the teacher works", fk=("schools", "school_id")
            ),
            col("subject", "TEXT", "cat", "subject", "main subject taught", variants=SUBJECTS),
            col("hire_date", "TEXT", "date", "hire date", "date the teacher was hired", date_format="iso"),
            col("salary", "INTEGER", "num", "salary", "annual salary in dollars"),
        ),
    ),
    Table(
        "test_scores",
        "test score record",
        "test score records",
        (
            col("score_id", "INTEGER", "id", "score id", "unique id of the record", pk=True),
            col("school_id", "INTEGER", "fk", "school id", "school tested", fk=("schools", "school_id")),
            col("exam_year", "INTEGER", "num", "exam year", "year of the exam"),
            col("subject", "TEXT", "cat", "exam subject", "subject of the exam"),
            col("avg_score", "REAL", "num", "average score", "average scaled score of the school's students"),
            col(
                "pct_proficient",
                "INTEGER",
                "num",
                "proficiency rate",
                "percentage of students rated proficient",
                pct="100",
            ),
        ),
    ),
)


def _school_name(rng: random.Random) -> str:
    patron = (
        rng.choice(w.LAST_NAMES) if rng.random() < 0.5 else f"{rng.choice(w.FIRST_NAMES)} {rng.choice(w.LAST_NAMES)}"
    )
    return f"{patron} {rng.choice(TYPES)} School"


def make_rows(rng: random.Random) -> dict[str, list[tuple]]:
    districts = [
        (i + 1, f"{city} Unified", rng.choice(("Alder", "Birch", "Cypress", "Dogwood", "Elm")), rng.choice(REGIONS))
        for i, city in enumerate(w.CITIES)
    ]
    schools = []
    for i, name in enumerate(w.unique(rng, 420, _school_name)):
        kind = next(t for t in TYPES if f" {t} " in f" {name} ")
        schools.append(
            (
                i + 1,
                name,
                rng.randrange(1, len(districts) + 1),
                kind,
                rng.randrange(1890, 2020),
                w.maybe_null(rng, rng.randrange(80, 2600), 0.07),
                round(rng.uniform(0.02, 0.95), 4),
            )
        )
    subjects = sorted(SUBJECTS)
    teachers = []
    for i, name in enumerate(w.unique(rng, 2600, w.person)):
        hired = w.date_between(rng, dt.date(1995, 1, 1), dt.date(2023, 8, 31))
        teachers.append(
            (
                i + 1,
                name,
                rng.randrange(1, len(schools) + 1),
                w.noisy_pick(rng, rng.choice(subjects), SUBJECTS, 0.2),
                w.fmt_date(hired, "iso"),
                rng.randrange(38, 120) * 1000,
            )
        )
    scores: list[tuple[int, int, int, str, float, int]] = []
    for school_id in range(1, len(schools) + 1):
        for year in (2021, 2022, 2023):
            for subject in rng.sample(("Mathematics", "English", "Science"), 2):
                scores.append(
                    (len(scores) + 1, school_id, year, subject, round(rng.uniform(180, 320), 1), rng.randrange(8, 97))
                )
    return {"districts": districts, "schools": schools, "teachers": teachers, "test_scores": scores}


@intent("moderate")
def high_frpm_schools(ctx: Ctx):
    k = ctx.choice([50, 60, 70, 80, 90])
    kind = ctx.choice(list(TYPES))
    m = ctx.mention(kind)
    ctx.hint("frpm_rate is a fraction; percentage = frpm_rate * 100", 0.8)
    q = ctx.say(
        [
            "How many {t} schools have more than {k}% of students eligible for free meals?",
            "Count the {t} schools whose free meal rate exceeds {k} percent.",
        ],
        t=m,
        k=k,
    )
    return (
        q,
        ctx.take_evidence(),
        f"SELECT COUNT(*) FROM schools WHERE school_type = {lit(kind)} AND frpm_rate > {k / 100}",
    )


@intent("challenging")
def district_proficiency(ctx: Ctx):
    year = ctx.choice([2021, 2022, 2023])
    subject = ctx.choice(["Mathematics", "English", "Science"])
    q = ctx.say(
        [
            "Which district had the highest average {s} proficiency rate in {y}?",
            "In {y}, name the district whose schools reached the best average proficiency in {s}.",
        ],
        s=ctx.mention(subject),
        y=year,
    )
    sql = (
        "SELECT T3.district_name FROM test_scores AS T1 INNER JOIN schools AS T2 ON T1.school_id = T2.school_id "
        "INNER JOIN districts AS T3 ON T2.district_id = T3.district_id "
        f"WHERE T1.exam_year = {year} AND T1.subject = {lit(subject)} GROUP BY T3.district_id "
        "ORDER BY AVG(T1.pct_proficient) DESC LIMIT 1"
    )
    return q, ctx.take_evidence(), sql


DOMAIN = Domain("schools", "train", "public schools", TABLES, make_rows, (high_frpm_schools, district_proficiency))
