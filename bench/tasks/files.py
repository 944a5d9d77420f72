"""The known dataset files: relative path, accepted sha256, upstream URL (pinned commit), whether needed.

Hashes come from the shared datasets README and were recomputed on the files (one README entry is
stale: `multiwoz_2.2/NOTICE` grew when the `db/` files were added; both versions are accepted).

`sha256` lists the hashes of the copies in the shared, offline datasets folder. `upstream_sha256` is
the hash of the whole upstream file where it is known; it is known exactly where the shared copy is
byte-identical to upstream (MultiWOZ db and schema, TruthfulQA, Self-Instruct, the LICENSE files).
The Super-NaturalInstructions task files of the shared folder keep 20 instances each, so the upstream
files (60+ instances) hash differently and no upstream hash is pinned for them: `bench data fetch`
downloads them from the pinned commit but cannot verify them beyond TLS, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

RAW = "https://raw.githubusercontent.com"
MULTIWOZ = f"{RAW}/budzianowski/multiwoz/fe0c8e65cfcd8462bd33c86e35f21addc84ca82b"
TRUTHFULQA = f"{RAW}/sylinrl/TruthfulQA/d71c110897f5d31c5d7f309e7bc316c152f6f031"
SELF_INSTRUCT = f"{RAW}/yizhongw/self-instruct/0b26ccaa415992100fa32df62d41b994cf928e23"
SUPERNI_REPO = f"{RAW}/allenai/natural-instructions"
SUPERNI_A = f"{SUPERNI_REPO}/ae457ac40dafe0cd3dcd1370f0a29da54f33df4a"
SUPERNI_B = f"{SUPERNI_REPO}/e0fd31052b21acea5bd95fb00253e1ee1f5d8259"


@dataclass(frozen=True)
class KnownFile:
    """One dataset file. `required`: a loader reads it (or it is the license that must travel with it)."""

    relpath: str
    sha256: tuple[str, ...]
    upstream_url: str | None = None
    upstream_sha256: str | None = None
    required: bool = True

    def accepts(self, digest: str) -> bool:
        return digest in self.sha256 or digest == self.upstream_sha256


def _same(relpath: str, sha: str, url: str, required: bool = True) -> KnownFile:
    """A whole upstream file copied byte for byte: the shared hash is the upstream hash."""
    return KnownFile(relpath, (sha,), url, sha, required)


def _superni(task: str, sha: str, base: str) -> KnownFile:
    path = f"tasks/{task}.json"
    return KnownFile(f"super_natural_instructions/{path}", (sha,), f"{base}/{path}", None, True)


APACHE_LICENSE = "c71d239df91726fc519c6eb72d318ec65820627232b2f796219e87dcf35d0ab4"

KNOWN_FILES: tuple[KnownFile, ...] = (
    # MultiWOZ 2.2
    _same(
        "multiwoz_2.2/LICENSE",
        "d84d5c0261e1cfc4b4f10f16497feb217800ae6bf89240ee5622a75f659f5124",
        f"{MULTIWOZ}/LICENSE",
    ),
    KnownFile(
        "multiwoz_2.2/NOTICE",
        (
            "4f4fdf195dc713ae99581c39610a0d2e6666db4c41d1bc0a72d4cef7c2ee438d",
            "2e7cd4731f21e59feaac401e256af0c1414dacc497b19d8b17cfd08cf5239034",
        ),
        required=False,
    ),
    _same(
        "multiwoz_2.2/schema.json",
        "ae9e2390f38fb967af64623c2f4f7e0c636fb377ad523b582a03161d3ddbdf68",
        f"{MULTIWOZ}/data/MultiWOZ_2.2/schema.json",
    ),
    _same(
        "multiwoz_2.2/db/attraction_db.json",
        "2aacc620af4025f1eada5ec83057a866f8e8b72b529f71d2f8bf93bcdd8f8751",
        f"{MULTIWOZ}/db/attraction_db.json",
    ),
    _same(
        "multiwoz_2.2/db/hotel_db.json",
        "7f7d0fa564f6735b6a168a3ab72c7ca6f1180c49fa8a285bd9ebf7dac10e5e45",
        f"{MULTIWOZ}/db/hotel_db.json",
    ),
    _same(
        "multiwoz_2.2/db/restaurant_db.json",
        "7864b4e36027af0907d6afe9ed962fecd6c6966cd626b8ae9341708a04ea201a",
        f"{MULTIWOZ}/db/restaurant_db.json",
    ),
    _same(
        "multiwoz_2.2/db/train_db.json",
        "4818e735bae20690f6d0d06bb2ae8eec1981c0b680258a970dc01c9073f3fec9",
        f"{MULTIWOZ}/db/train_db.json",
    ),
    _same(
        "multiwoz_2.2/db/hospital_db.json",
        "51282ab30346d4e826fbdf6a668d346f4b1e72425190d62048a7c471ffba5020",
        f"{MULTIWOZ}/db/hospital_db.json",
        required=False,
    ),
    _same(
        "multiwoz_2.2/db/police_db.json",
        "d9c2b200fa2dd61b04ce2fe520b0b79dfa68d8b895806cfec6e8a8d3cffa9193",
        f"{MULTIWOZ}/db/police_db.json",
        required=False,
    ),
    _same(
        "multiwoz_2.2/db/taxi_db.json",
        "6b676ae412ef17a15c24594bec99f61ed6a18b0fbecf6ed89d409baa924b89c1",
        f"{MULTIWOZ}/db/taxi_db.json",
        required=False,
    ),
    # TruthfulQA
    _same("truthfulqa/LICENSE", APACHE_LICENSE, f"{TRUTHFULQA}/LICENSE"),
    KnownFile(
        "truthfulqa/NOTICE",
        ("437eb7689cd6d8445aa933b1e58cfb35749984cc54537112598b93593606c887",),
        required=False,
    ),
    _same(
        "truthfulqa/TruthfulQA.csv",
        "b8d8ef1e12f98b4f2a9f47abc9765da0640b182b6c5d9b92f0c1a1f2f1e02e5c",
        f"{TRUTHFULQA}/TruthfulQA.csv",
    ),
    _same(
        "truthfulqa/data/v1/TruthfulQA.csv",
        "f9bd9e859cc102cb1f647f1064da7e009be752c416845cf9fa56e6eaae403a7d",
        f"{TRUTHFULQA}/data/v1/TruthfulQA.csv",
    ),
    # Self-Instruct
    _same("self_instruct/LICENSE", APACHE_LICENSE, f"{SELF_INSTRUCT}/LICENSE"),
    KnownFile(
        "self_instruct/NOTICE",
        ("e7df96484c2b1778aeae9e5e05a2da75bc99a5ff70cc9f37d84d11156219eae5",),
        required=False,
    ),
    _same(
        "self_instruct/seed_tasks.jsonl",
        "7779004fa198fdf27cf70a159363879d8a26c53329e11b436af17b3941875f48",
        f"{SELF_INSTRUCT}/data/seed_tasks.jsonl",
    ),
    _same(
        "self_instruct/user_oriented_instructions.jsonl",
        "81d60a117db495cecedecd9193504fd07c5b5a42f6699ef6b0f9da10fc22f42e",
        f"{SELF_INSTRUCT}/human_eval/user_oriented_instructions.jsonl",
    ),
    # Super-NaturalInstructions (shared copies: 20 instances per task; upstream hashes unknown)
    _same("super_natural_instructions/LICENSE", APACHE_LICENSE, f"{SUPERNI_A}/LICENSE"),
    KnownFile(
        "super_natural_instructions/NOTICE",
        ("21676ce2466daa89355774263ffb711a600e4ceb0a8c149441c9518744b36721",),
        required=False,
    ),
    KnownFile(
        "super_natural_instructions/selection.json",
        ("1d5ce916af1503971133e62019fbc2118676d2964a1dead4da261d61d5824853",),
        required=False,
    ),
    KnownFile(
        "super_natural_instructions/splits/default/test_tasks.txt",
        ("8b2068c1e0c5e545abd1172fcf83b17935a791dae19912b5cf68e29355af3cba",),
        required=False,
    ),
    KnownFile(
        "super_natural_instructions/splits/default/train_tasks.txt",
        ("7ba69b22c1d6096f9747290782e5e0f358728407b065c4bd561fdf4f6239db1c",),
        required=False,
    ),
    _superni(
        "task102_commongen_sentence_generation",
        "81bd61472838b4abf91a971961c1c9902c227ca577dcee4f79651f8d3760268a",
        SUPERNI_B,
    ),
    _superni(
        "task115_help_advice_classification",
        "23f70302701e881b3e061e4dafc727b420da2e9f9bf1e96de8a6933efbbf19c3",
        SUPERNI_A,
    ),
    _superni(
        "task118_semeval_2019_task10_open_vocabulary_mathematical_answer_generation",
        "7b83e7e7dd87216f26d4062ea5a1b545985e673e8dbebba83c0cb862c99da4ea",
        SUPERNI_A,
    ),
    _superni(
        "task1192_food_flavor_profile",
        "a433382b2cf1066480ec10671a90303642740d09553dee387c465412afa35995",
        SUPERNI_A,
    ),
    _superni(
        "task1294_wiki_qa_answer_verification",
        "b9644d573676084c64a714856ec3945c578d53a16d4fd7d712ee749aacef50f1",
        SUPERNI_B,
    ),
    _superni(
        "task132_dais_text_modification",
        "ea3c7e2e8a21f9cd10cd36776567923a63636be8aeb272e7b0c0b5020205d291",
        SUPERNI_B,
    ),
    _superni(
        "task1380_quarel_correct_option_generation",
        "68155123c0303b22645113f13b98b367776a12d739695426a85b7d4fd436eb64",
        SUPERNI_B,
    ),
    _superni(
        "task1703_ljspeech_textmodification",
        "3cad14a177d429ddf1f709b13f3a1d466812ed870f49e97f6bede16e09eb4ff4",
        SUPERNI_A,
    ),
    _superni(
        "task244_count_elements_in_set_union",
        "7e09b6d19fbf18b75d5eee4b1df6e72cd8deecf5956f853a11e173aa17ca2181",
        SUPERNI_B,
    ),
    _superni(
        "task324_jigsaw_classification_disagree",
        "4c439c9e9906378d40499304dd444e07ff074319d7b8ede203012b06908090fc",
        SUPERNI_A,
    ),
    _superni(
        "task327_jigsaw_classification_toxic",
        "029af1619e3fb1341c513e1fe67a65522b63f485b8309dc1d5eda374c9a638d3",
        SUPERNI_A,
    ),
    _superni(
        "task344_hybridqa_answer_generation",
        "e78f93cbf5d55b5ac1ad2ebf2e813ab634301fb524850adce866a5000644ac19",
        SUPERNI_B,
    ),
)


def by_relpath() -> dict[str, KnownFile]:
    return {f.relpath: f for f in KNOWN_FILES}
