"""Dev database ``clinic``: clinics, doctors, patients, visits and lab results.

Noise: abbreviated column names (doc_nm, spec, yrs_exp, dob, dx_cd, ...), a noisy
specialty and sex column, dates as DD/MM/YYYY, MM/DD/YYYY and ISO datetime text, fees
stored as text, copay as a 0-1 fraction and lab percentiles as 0-100, a visits.doc_id
TEXT key referencing the INTEGER doctors.doc_id, NULLs, and a cp1252 description CSV.
"""

from __future__ import annotations

import datetime as dt
import random

from eval.data.minibird import words as w
from eval.data.minibird.questions import Ctx, intent, lit
from eval.data.minibird.spec import Domain, Table, col

SPECIALTIES = {
    "Cardiology": ("cardiology", "Cardiolgy", "CARDIOLOGY"),
    "Dermatology": ("dermatology", "Dermatolgy"),
    "Pediatrics": ("pediatrics", "Paediatrics"),
    "Neurology": ("neurology", "NEUROLOGY"),
    "Orthopedics": ("orthopedics", "Orthopaedics"),
    "General Practice": ("general practice", "General practice", "GP"),
}
SEX = {"F": ("f", "Female", "female"), "M": ("m", "Male", "male")}
DIAGNOSES = ("J45", "E11", "I10", "M54", "K21", "F41", "J06", "L20")
DX_MEANING = (
    "J45 = asthma, E11 = type 2 diabetes, I10 = hypertension, M54 = back pain, K21 = reflux, F41 = anxiety, "
    "J06 = upper respiratory infection, L20 = eczema"
)
LAB_TESTS = (
    ("Glucose", "mg/dL", 70, 180),
    ("Cholesterol", "mg/dL", 120, 280),
    ("Hemoglobin", "g/dL", 10, 18),
    ("Creatinine", "µmol/L", 50, 130),
    ("Temperature", "°C", 36, 40),
)
PLANS = ("Basic", "Silver", "Gold", "Platinum")

TABLES = (
    Table(
        "clinics",
        "clinic",
        "clinics",
        (
            col("clinic_id", "INTEGER", "id", "clinic id", "unique id of the clinic", pk=True),
            col("clinic_name", "TEXT", "name", "clinic name", "name of the clinic"),
            col("city", "TEXT", "cat", "city", "city where the clinic is located"),
            col(
                "opened_dt",
                "TEXT",
                "date",
                "opening date",
                "date the clinic opened",
                date_format="dmy",
                abbreviated=True,
            ),
            col("beds", "INTEGER", "num", "number of beds", "number of inpatient beds"),
        ),
    ),
    Table(
        "doctors",
        "doctor",
        "doctors",
        (
            col("doc_id", "INTEGER", "id", "doctor id", "unique id of the doctor", pk=True),
            col("doc_nm", "TEXT", "name", "doctor name", "full name of the doctor", abbreviated=True),
            col(
                "spec",
                "TEXT",
                "cat",
                "specialty",
                "medical specialty of the doctor",
                abbreviated=True,
                variants=SPECIALTIES,
                value_description="free text entered by staff; spellings vary",
            ),
            col("clinic_id", "INTEGER", "fk", "clinic id", "clinic the doctor works at", fk=("clinics", "clinic_id")),
            col("yrs_exp", "INTEGER", "num", "years of experience", "years of clinical experience", abbreviated=True),
            col(
                "hire_dt", "TEXT", "date", "hire date", "date the doctor was hired", date_format="iso", abbreviated=True
            ),
        ),
    ),
    Table(
        "patients",
        "patient",
        "patients",
        (
            col("pat_id", "INTEGER", "id", "patient id", "unique id of the patient", pk=True),
            col("pat_nm", "TEXT", "name", "patient name", "full name of the patient", abbreviated=True),
            col(
                "sex",
                "TEXT",
                "cat",
                "sex",
                "sex of the patient",
                variants=SEX,
                value_description="F = female, M = male; some rows spell it out",
            ),
            col("dob", "TEXT", "date", "date of birth", "patient's date of birth", date_format="mdy", abbreviated=True),
            col("city", "TEXT", "cat", "home city", "city the patient lives in"),
            col(
                "ins_plan",
                "TEXT",
                "cat",
                "insurance plan",
                "insurance plan of the patient; NULL when uninsured",
                nullable=True,
                abbreviated=True,
            ),
        ),
    ),
    Table(
        "visits",
        "visit",
        "visits",
        (
            col("visit_id", "INTEGER", "id", "visit id", "unique id of the visit", pk=True),
            col("pat_id", "INTEGER", "fk", "patient id", "patient seen", fk=("patients", "pat_id")),
            col("doc_id", "TEXT", "fk", "doctor id", "doctor seen (stored as text)", fk=("doctors", "doc_id")),
            col(
                "visit_dt",
                "TEXT",
                "date",
                "visit date",
                "date and time of the visit",
                date_format="iso_dt",
                abbreviated=True,
            ),
            col(
                "dx_cd",
                "TEXT",
                "cat",
                "diagnosis code",
                "ICD-10 diagnosis code of the visit",
                value_description=DX_MEANING,
                abbreviated=True,
            ),
            col("fee", "TEXT", "num", "fee", "fee charged for the visit in dollars", textnum=True),
            col(
                "copay_pct",
                "REAL",
                "num",
                "copay rate",
                "share of the fee the patient pays",
                pct="frac",
                nullable=True,
                abbreviated=True,
            ),
        ),
    ),
    Table(
        "lab_results",
        "lab result",
        "lab results",
        (
            col("lab_id", "INTEGER", "id", "lab result id", "unique id of the lab result", pk=True),
            col(
                "visit_id",
                "INTEGER",
                "fk",
                "visit id",
                "visit during which the sample was taken",
                fk=("visits", "visit_id"),
            ),
            col("test_nm", "TEXT", "cat", "test name", "name of the laboratory test", abbreviated=True),
            col("result_val", "REAL", "num", "result value", "measured value, in the unit given (e.g. °C, µmol/L)"),
            col("unit", "TEXT", "cat", "unit", "unit of the measured value (°C for temperature)"),
            col(
                "ref_pctl",
                "INTEGER",
                "num",
                "reference percentile",
                "percentile of the result in the reference population",
                pct="100",
                nullable=True,
                abbreviated=True,
            ),
        ),
        csv_encoding="cp1252",
    ),
)


def make_rows(rng: random.Random) -> dict[str, list[tuple]]:
    suffixes = ("Family Clinic", "Health Centre", "Medical Group", "Clínica", "Care Point")
    cities = w.CITIES[:12]
    clinics = []
    for i, name in enumerate(w.unique(rng, 24, lambda r: f"{r.choice(cities)} {r.choice(suffixes)}")):
        city = next(c for c in cities if name.startswith(c + " "))
        opened = w.date_between(rng, dt.date(1985, 1, 1), dt.date(2015, 12, 31))
        clinics.append((i + 1, name, city, w.fmt_date(opened, "dmy"), rng.randrange(0, 120)))
    spec_names = sorted(SPECIALTIES)
    doctors = []
    for i, name in enumerate(w.unique(rng, 160, lambda r: "Dr. " + w.person(r))):
        spec = w.noisy_pick(rng, w.weighted(rng, spec_names, (3, 2, 3, 2, 2, 5)), SPECIALTIES, 0.3)
        hired = w.date_between(rng, dt.date(2000, 1, 1), dt.date(2023, 12, 31))
        doctors.append((i + 1, name, spec, rng.randrange(1, 25), rng.randrange(1, 36), w.fmt_date(hired, "iso")))
    patients = []
    for i, name in enumerate(w.unique(rng, 1400, w.person)):
        sex = w.noisy_pick(rng, rng.choice(("F", "M")), SEX, 0.15)
        born = w.date_between(rng, dt.date(1935, 1, 1), dt.date(2020, 12, 31))
        patients.append(
            (
                i + 1,
                name,
                sex,
                w.fmt_date(born, "mdy"),
                rng.choice(cities),
                w.maybe_null(rng, w.weighted(rng, PLANS, (4, 3, 2, 1)), 0.18),
            )
        )
    visits = []
    for i in range(3600):
        day = w.date_between(rng, dt.date(2019, 1, 1), dt.date(2023, 12, 31))
        fee = rng.choice((60, 75, 90, 120, 150, 180, 240, 320))
        visits.append(
            (
                i + 1,
                rng.randrange(1, len(patients) + 1),
                str(rng.randrange(1, len(doctors) + 1)),
                w.fmt_date(day, "iso_dt", rng),
                rng.choice(DIAGNOSES),
                str(fee),
                w.maybe_null(rng, rng.choice((0.0, 0.1, 0.2, 0.25, 0.3, 0.5)), 0.1),
            )
        )
    labs = []
    for i in range(2600):
        test, unit, lo, hi = rng.choice(LAB_TESTS)
        value = round(rng.uniform(lo, hi), 1)
        labs.append(
            (
                i + 1,
                rng.randrange(1, len(visits) + 1),
                test,
                value,
                unit,
                w.maybe_null(rng, int(100 * (value - lo) / (hi - lo)), 0.12),
            )
        )
    return {"clinics": clinics, "doctors": doctors, "patients": patients, "visits": visits, "lab_results": labs}


@intent("moderate")
def visits_by_specialty(ctx: Ctx):
    doctors, visits = ctx.domain.table("doctors"), ctx.domain.table("visits")
    spec = doctors.column("spec")
    cond, m = ctx.cat_cond(doctors, spec, ctx.choice(sorted(SPECIALTIES)), alias="T2")
    on = ctx.join("T1", visits.column("doc_id"), "T2", doctors.column("doc_id"))
    year = ctx.choice(["2019", "2020", "2021", "2022", "2023"])
    q = ctx.say(
        [
            "How many visits were made to {v} doctors in {y}?",
            "In {y}, how many visits did doctors specialising in {v} handle?",
        ],
        v=m,
        y=year,
    )
    sql = (
        f"SELECT COUNT(*) FROM visits AS T1 INNER JOIN doctors AS T2 ON {on} WHERE {cond} "
        f"AND STRFTIME('%Y', T1.visit_dt) = {lit(year)}"
    )
    return q, ctx.take_evidence(), sql


@intent("challenging")
def patients_born_before(ctx: Ctx):
    year = ctx.rng.randrange(1940, 2000)
    ctx.hint("dob is stored as text in the format MM/DD/YYYY", 1.0)
    sex = ctx.choice(["F", "M"])
    cond, m = ctx.cat_cond(ctx.domain.table("patients"), ctx.domain.table("patients").column("sex"), sex)
    word = {"f": "female", "m": "male"}.get(m.lower(), m)
    q = ctx.say(
        [
            "How many {s} patients were born before {y}?",
            "Count the {s} patients whose date of birth is earlier than {y}.",
        ],
        s=word,
        y=year,
    )
    ctx.hint(f"{word} refers to sex = '{sex}' in any spelling", 0.5)
    return (
        q,
        ctx.take_evidence(),
        f"SELECT COUNT(*) FROM patients WHERE CAST(SUBSTR(dob, 7, 4) AS INTEGER) < {year} AND {cond}",
    )


@intent("challenging")
def avg_paid_by_patient(ctx: Ctx):
    dx = ctx.choice(DIAGNOSES)
    ctx.hint("amount paid by the patient = fee * copay_pct; fee is stored as text", 0.8)
    ctx.hint(f"diagnosis {dx} refers to dx_cd = '{dx}'", 0.5)
    q = ctx.say(
        [
            "What is the average amount patients paid themselves for visits with diagnosis {d}?",
            "For visits diagnosed {d}, what is the mean out-of-pocket payment?",
        ],
        d=dx,
    )
    sql = f"SELECT AVG(CAST(fee AS REAL) * copay_pct) FROM visits WHERE dx_cd = '{dx}' AND copay_pct IS NOT NULL"
    return q, ctx.take_evidence(), sql


@intent("challenging")
def abnormal_lab_share(ctx: Ctx):
    test, *_ = ctx.choice(LAB_TESTS)
    k = ctx.choice([80, 90, 95])
    ctx.hint("ref_pctl is a percentile between 0 and 100", 0.7)
    q = ctx.say(
        [
            "What percentage of {t} results are at or above the {k}th reference percentile?",
            "Among {t} lab results with a known percentile, what percent reach the {k}th percentile?",
        ],
        t=ctx.mention(test),
        k=k,
    )
    sql = (
        f"SELECT CAST(SUM(CASE WHEN ref_pctl >= {k} THEN 1 ELSE 0 END) AS REAL) * 100 / COUNT(ref_pctl) "
        f"FROM lab_results WHERE test_nm = '{test}'"
    )
    return q, ctx.take_evidence(), sql


@intent("simple")
def clinics_opened_in(ctx: Ctx):
    year = ctx.choice([r[0] for r in ctx.rows("SELECT DISTINCT SUBSTR(opened_dt, 7, 4) FROM clinics ORDER BY 1")])
    ctx.hint("opened_dt is stored as text in the format DD/MM/YYYY", 0.8)
    q = ctx.say(["Which clinics opened in {y}?", "List the names of clinics that opened in {y}."], y=year)
    return q, ctx.take_evidence(), f"SELECT clinic_name FROM clinics WHERE SUBSTR(opened_dt, 7, 4) = '{year}'"


DOMAIN = Domain(
    "clinic",
    "dev",
    "outpatient clinics",
    TABLES,
    make_rows,
    (visits_by_specialty, patients_born_before, avg_paid_by_patient, abnormal_lab_share, clinics_opened_in),
)
