"""A small judged cross-lingual set: daily notes in Chinese, Japanese and English, questions in
another language than the note that answers them.

Written for memoryd (not taken from any benchmark): twelve daily notes of three unrelated lines
each, the way an agent writes them, twelve more that answer nothing, and 31 questions that paraphrase one line in another
language (English→Chinese, English→Japanese, Chinese/Japanese→English, Chinese↔Japanese). A
question is answered when a result holds its note and the answering line is in the snippet.
Some questions share a script with their note (`大阪`, `Acme`), as real mixed-language memory
does; most share no word at all, which is what the vector side must carry.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .datasets import Dataset, Query, Workspace, _prune, _write_if_changed

NOTES: dict[str, list[str]] = {
    "memory/2026-03-02.md": [
        "北京会议的预算由王芳负责，上限是二十万元。",
        "会场定在朝阳区的国贸大酒店，三楼宴会厅。",
        "李明负责联系同声传译，需要中英双语。",
    ],
    "memory/2026-03-09.md": [
        "服务器迁移推迟到四月中旬，因为新机房的电力还没通过验收。",
        "张伟下周休陪产假，他的值班由赵磊代替。",
        "新的报销制度：超过五千元的发票必须由部门经理签字。",
    ],
    "memory/2026-03-15.md": [
        "女儿的钢琴课改到每周六上午十点，老师姓陈。",
        "周末去杭州看望父母，高铁票已经买好了。",
        "体检报告显示胆固醇偏高，医生建议少吃油炸食品。",
    ],
    "memory/2026-03-21.md": [
        "客户反馈手机应用在安卓十四上登录时会闪退。",
        "决定下个季度把日志系统从 Elasticsearch 换成 ClickHouse。",
        "年会定在一月十八日，地点在苏州。",
    ],
    "memory/2026-04-03.md": [
        "大阪支社の新しいオフィスは来月から梅田で稼働する。",
        "田中さんが経費精算システムの担当になった。",
        "歓迎会は金曜日の夜七時、居酒屋「とり鉄」で。",
    ],
    "memory/2026-04-10.md": [
        "本番データベースのバックアップは毎晩三時に取得し、三十日間保存する。",
        "証明書の有効期限は六月末なので、五月中に更新すること。",
        "新人研修の講師は鈴木さんと山本さんにお願いした。",
    ],
    "memory/2026-04-17.md": [
        "息子の運動会は五月二十日、雨天の場合は翌日に延期。",
        "歯医者の予約を火曜日の午後四時に変更した。",
        "京都旅行の宿は嵐山の旅館を二泊予約済み。",
    ],
    "memory/2026-04-24.md": [
        "顧客アンケートの結果、満足度は前年より八ポイント上がった。",
        "価格改定は七月一日から実施し、平均五パーセントの値上げ。",
        "競合他社が似たような製品を秋に発売するらしい。",
    ],
    "memory/2026-05-05.md": [
        "The Berlin offsite is moved to the second week of June; Priya books the venue.",
        "Our cloud bill jumped 40% in April because of an unused GPU cluster nobody shut down.",
        "Marco is the new on-call lead for the payments service.",
    ],
    "memory/2026-05-12.md": [
        "Mum's birthday dinner is on Saturday at the Thai place near the station.",
        "The car needs new winter tyres before November; the garage quoted 480 euros.",
        "Started running again: 5 km on Monday, Wednesday and Friday mornings.",
    ],
    "memory/2026-05-19.md": [
        "The vendor contract with Acme renews automatically on 1 September unless we cancel "
        "60 days before.",
        "Security audit found two admin accounts without two-factor authentication.",
        "Hiring freeze for the rest of the year, except for the data team.",
    ],
    "memory/2026-05-26.md": [
        "Flight to Singapore leaves Thursday at 23:40 from terminal 2.",
        "The apartment lease ends in August; the landlord wants a 6% rent increase.",
        "Dr. Okafor recommends physiotherapy twice a week for the knee.",
    ],
}

# Notes that answer none of the questions: without them six results would cover half the set.
DISTRACTORS: dict[str, list[str]] = {
    "memory/2026-02-02.md": [
        "周一早上的站会改成线上，链接发在群里。",
        "给小区物业交了下半年的停车费。",
        "读完了《三体》第二部，准备开始第三部。",
    ],
    "memory/2026-02-06.md": [
        "测试环境的数据库密码已经轮换，新密码在保险库里。",
        "前端团队决定统一使用 TypeScript 严格模式。",
        "周五下午大扫除，记得带手套。",
    ],
    "memory/2026-02-11.md": [
        "春节前要把所有的合同归档。",
        "奶奶的生日礼物买了一条羊毛围巾。",
        "家里的路由器晚上经常掉线，需要换一个。",
    ],
    "memory/2026-02-17.md": [
        "产品经理希望在登录页加上微信扫码。",
        "这个月的用电量比上个月多了三成。",
        "学了一道新菜：西红柿炒鸡蛋。",
    ],
    "memory/2026-02-20.md": [
        "朝会の時間が九時半に変わった。",
        "プリンターのトナーが切れたので総務に連絡した。",
        "週末は友達と映画を見に行く予定。",
    ],
    "memory/2026-02-24.md": [
        "社内ウィキの検索が遅いという苦情が多い。",
        "図書館で借りた本の返却期限は来週の水曜日。",
        "ジムの会員を月額プランに変更した。",
    ],
    "memory/2026-02-27.md": [
        "新しいノートパソコンのキーボードが英語配列だった。",
        "隣の部署と合同でランチ会をすることになった。",
        "観葉植物に水をやるのを忘れないこと。",
    ],
    "memory/2026-03-04.md": [
        "ログ監視のアラートが夜中に三回鳴った。",
        "妻の実家から梨が送られてきた。",
        "英語の勉強のためにポッドキャストを聞き始めた。",
    ],
    "memory/2026-01-08.md": [
        "Replaced the kitchen tap; the old one had been leaking for weeks.",
        "The design review for the search page is pushed to next sprint.",
        "Booked a haircut for Saturday at ten.",
    ],
    "memory/2026-01-13.md": [
        "Our staging cluster ran out of disk again; added a cleanup cron job.",
        "Lena recommended a podcast about the history of maps.",
        "The library book on bread baking is due back on Friday.",
    ],
    "memory/2026-01-19.md": [
        "Switched the team chat to threads-only in the support channel.",
        "Paid the electricity bill; it was higher than usual because of the heater.",
        "Planning to repaint the spare room in a light green.",
    ],
    "memory/2026-01-23.md": [
        "Code freeze for the mobile release starts on the 30th.",
        "The neighbours' dog is called Biscuit and barks at the postman.",
        "Tried a new ramen place downtown; the broth was too salty.",
    ],
}

# (question, note, a piece of the answering line)
QUESTIONS: list[tuple[str, str, str]] = [
    # English → Chinese
    ("who is in charge of the budget for the Beijing meeting", "2026-03-02", "王芳"),
    ("which hotel hosts the Beijing meeting?", "2026-03-02", "国贸大酒店"),
    ("who arranges the simultaneous interpreters?", "2026-03-02", "同声传译"),
    ("why was the server migration postponed?", "2026-03-09", "电力"),
    ("who covers Zhang Wei's on-call shifts during his paternity leave?", "2026-03-09", "赵磊"),
    ("which invoices need a department manager's signature?", "2026-03-09", "报销"),
    ("when is my daughter's piano lesson now?", "2026-03-15", "钢琴课"),
    ("what did the doctor say about my cholesterol?", "2026-03-15", "胆固醇"),
    ("on which Android version does the mobile app crash at login?", "2026-03-21", "安卓"),
    ("where is the annual company party this year?", "2026-03-21", "年会"),
    # English → Japanese
    ("when does the new Osaka office open?", "2026-04-03", "梅田"),
    ("who handles the expense reimbursement system now?", "2026-04-03", "経費精算"),
    ("how long are database backups kept?", "2026-04-10", "バックアップ"),
    ("when does the TLS certificate expire?", "2026-04-10", "証明書"),
    ("when is my son's sports day?", "2026-04-17", "運動会"),
    ("where are we staying in Kyoto?", "2026-04-17", "嵐山"),
    ("how much did customer satisfaction improve in the survey?", "2026-04-24", "満足度"),
    ("when does the price increase take effect?", "2026-04-24", "価格改定"),
    # Chinese / Japanese → English
    ("柏林团建改到什么时候了？", "2026-05-05", "Berlin offsite"),
    ("四月份云服务费用为什么上涨？", "2026-05-05", "cloud bill"),
    ("支付服务的值班负责人是谁？", "2026-05-05", "on-call lead"),
    ("車のタイヤ交換の見積もりはいくら？", "2026-05-12", "winter tyres"),
    ("母の誕生日の夕食はどこで？", "2026-05-12", "birthday dinner"),
    ("Acme社との契約はいつ自動更新されますか", "2026-05-19", "renews automatically"),
    ("セキュリティ監査で何が見つかった？", "2026-05-19", "Security audit"),
    ("今年公司还招人吗？", "2026-05-19", "Hiring freeze"),
    ("去新加坡的航班几点起飞？", "2026-05-26", "Singapore"),
    ("房东要涨多少房租？", "2026-05-26", "rent increase"),
    ("膝の治療について医者は何と言った？", "2026-05-26", "physiotherapy"),
    # Chinese ↔ Japanese
    ("大阪的新办公室什么时候启用？", "2026-04-03", "梅田"),
    ("北京の会議の予算担当は誰ですか", "2026-03-02", "王芳"),
]


@dataclass
class Judgment:
    path: str
    answer: str


def note_text(path: str, lines: list[str]) -> str:
    day = Path(path).stem
    return f"# {day}\n\n" + "\n".join(f"- {line}" for line in lines) + "\n"


def load_crosslingual(out: Path) -> tuple[Dataset, dict[str, Judgment]]:
    """Write the workspace under `<out>/crosslingual` and return it with its judgments."""
    root = out / "crosslingual"
    written = set()
    for rel, lines in {**NOTES, **DISTRACTORS}.items():
        path = root / rel
        _write_if_changed(path, note_text(rel, lines))
        written.add(path)
    _prune(root, written)
    queries = []
    judged: dict[str, Judgment] = {}
    for i, (text, day, answer) in enumerate(QUESTIONS):
        qid = f"crosslingual:{i}"
        queries.append(Query(qid=qid, text=text, category=_direction(text, day)))
        judged[qid] = Judgment(f"memory/{day}.md", answer)
    ws = Workspace("crosslingual", root, queries)
    return Dataset("crosslingual", "crosslingual", [ws]), judged


def _direction(question: str, day: str) -> str:
    return f"{_script(question)}→{_script(''.join(NOTES[f'memory/{day}.md']))}"


def _script(text: str) -> str:
    if any("\u3040" <= ch <= "\u30ff" for ch in text):
        return "ja"
    if any("\u4e00" <= ch <= "\u9fff" for ch in text):
        return "zh"
    return "en"


def crosslingual_row(judgment: Judgment, results: list[dict[str, Any]]) -> dict[str, float]:
    """Answered = the note is returned with the answering line in its snippet; rank of that."""
    first = next(
        (
            i
            for i, r in enumerate(results, 1)
            if r["path"] == judgment.path and judgment.answer in r["snippet"]
        ),
        None,
    )
    return {
        "hit": 1.0 if first else 0.0,
        "rr": 1.0 / first if first else 0.0,
        "n_results": float(len(results)),
        "chars": float(sum(len(r["snippet"]) for r in results)),
    }
