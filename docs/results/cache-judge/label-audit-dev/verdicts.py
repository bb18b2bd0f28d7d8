"""Hand verdicts for the dev audit. Default: negatives 'different' (the labelled contrast really
changes the answer), positives 'same' (true paraphrase). Exceptions listed with reasons."""
import json, csv, collections
ROOT = '/work/main/'
rows = [json.loads(l) for l in open(ROOT + 'tests/data/judge/dev.jsonl')]
sc = json.load(open(ROOT + 'docs/results/cache-judge/gpu-sweep4/mpnet-2e5/dev_scores.json'))["5/2e-5/mean/11/32"]
sel = json.load(open(ROOT + 'docs/results/cache-judge/label-audit-dev/sel.json'))

EXC = {  # idx: (verdict, reason, cause)
 908: ('same', "'2-step verification' = '2FA'; both ask how to turn on 2FA on Instagram", 'topic_pairs crossed two families that ask the same question (g8_040 written family vs account frame op "enable two-factor authentication on/turn on 2FA for" svc Instagram)'),
 3688: ('ambiguous', "same comparison (JS vs Python speed); only yes/no polarity flips ('No, JS is faster' vs 'Yes')", 'seed27 direction contrast on a binary comparative; its same-set also holds symmetric forms ("js vs python speed", "which runs quicker, javascript or python")'),
 347: ('ambiguous', "same fact (Australia ~3.5x Greenland); yes/no polarity flips", 'seed36 direction contrast on a binary comparative'),
 4962: ('ambiguous', "'can I reduce my docker build context?' expects the how; 'Yes, use .dockerignore...' serves both", 'intent_pairs ASKS can-vs-how labelled modality/different'),
 1249: ('ambiguous', "B 'check ssl cert expiry openssl' is underspecified; local cert.pem is a valid reading (openssl x509 -enddate -in ...)", 'g1_038 terse same-member drops the site-vs-local detail that the scope contrast changes'),
 2448: ('ambiguous', "'What does the Second Amendment say?' can mean text or meaning; a plain-English rephrase is one reading", 'g3_052 same-member "What does the Second Amendment say?" is ambiguous between quote and explain'),
 4841: ('ambiguous', "German dividends and capital gains on shares fall under the same 25% Abgeltungsteuer + soli; the answers largely coincide", 'g11_009 entity contrast whose real answer coincides'),
 6657: ('ambiguous', "PayPal has no temporary deactivation; 'deactivate' there means closing", 'account frame op change deactivate-group vs delete-group for a service without deactivation'),
 7333: ('ambiguous', "'allowed screens at all?' vs 'how much per day?' — the guideline answer ('yes, <=1 h/day of quality content') serves both", 'g9_089 modality contrast vs guideline question'),
}
GENERIC = {
 'negation': 'negated/opposite condition changes the answer', 'entity': 'different entity',
 'number': 'different quantity', 'unit': 'answer asked in another unit/quantity form',
 'version': 'different version/era', 'time': 'different time/period/moment',
 'direction': 'direction reversed (from/to, A->B vs B->A)', 'role': 'roles swapped / other party',
 'scope': 'narrower or wider scope; answers differ', 'task': 'different task (explain/write/read/append/...)',
 'payload': 'different embedded text/code/data', 'constraint': 'added requirement changes the answer',
 'modality': 'can/should/how differ', 'topic': 'unrelated questions'}
NOTES = {  # agreeing rows worth a specific word
 204: 'EU city proper (Berlin) vs metro area (Paris)', 2680: 'city vs metro area',
 871: 'mortgage rates set by lenders vs Bank Rate by BoE MPC', 1430: 'APY->APR vs APR->EAR',
 2765: 'best case O(1) vs usual O(log n)', 4439: 'days-left computation vs expiry date',
 6828: 'days-left computation vs expiry date', 4163: 'amoxicillin-specific vs all antibiotics (metronidazole)',
 2530: 'general dehydration signs vs severe only', 6247: 'general rule vs a specific 375F case',
 1715: 'answer in F vs asked in C', 6764: 'answer in F vs asked in C', 2831: "joy at others' success is not Schadenfreude",
 6454: 'labels fine but A is malformed: Excel has no delimiter (file_io constraint template)',
 4069: "labels fine but B is malformed ('Why is it not the case that the sky red at sunset?')",
 7: "labels fine but B is unnatural ('Is it wise to regain access to...')",
 1027: 'diabetic target vs normal range',
}
out = []
for grp in ('fh', 'negs', 'negs2', 'miss'):
    for i in sel[grp]:
        r = rows[i]
        if i in EXC:
            v, reason, cause = EXC[i]
        elif r['same']:
            v, reason, cause = 'same', 'paraphrase; one answer serves both', ''
        else:
            v, reason, cause = 'different', NOTES.get(i, GENERIC.get(r['kind'], 'answers differ')), ''
        lab = 'same' if r['same'] else 'different'
        agree = 'ambiguous' if v == 'ambiguous' else ('agree' if v == lab else 'disagree')
        out.append(dict(group=grp, idx=i, score=round(sc[i], 3), label=lab, kind=r['kind'],
                        family=r['family'], verdict=v, agreement=agree, reason=reason, cause=cause,
                        a=r['a'].replace('\n', ' \\n '), b=r['b'].replace('\n', ' \\n ')))
cols = ['group', 'idx', 'score', 'a', 'b', 'label', 'kind', 'family', 'verdict', 'agreement', 'reason', 'cause']
import os
os.makedirs('/tmp/audit', exist_ok=True)  # the rebuilt tables; compare with the committed ones
for name, keep in (('verdicts.tsv', lambda o: True), ('disagree.tsv', lambda o: o['agreement'] != 'agree')):
    with open('/tmp/audit/' + name, 'w', newline='') as f:
        w = csv.DictWriter(f, cols, delimiter='\t', extrasaction='ignore'); w.writeheader()
        for o in out:
            if keep(o): w.writerow(o)
for grp in ('fh', 'negs', 'negs2', 'miss'):
    c = collections.Counter(o['agreement'] for o in out if o['group'] == grp)
    k = collections.Counter((o['kind'], o['agreement']) for o in out if o['group'] == grp and o['agreement'] != 'agree')
    print(grp, dict(c), dict(k))
