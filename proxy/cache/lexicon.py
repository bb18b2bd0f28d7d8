"""Word lists for the near-miss verifier (data only; lowercase)."""

from __future__ import annotations

STOPWORDS = frozenset("""
a an the of in on at for with by about as is are was were be been being am do does did doing
done i me my mine we us our you your yours he she it its they them their this that these those
there here what which who whom whose when where why how can could would should shall will may
might must please pls plz tell explain show give let lets let's know want need like just some
any way ways method methods best good proper correct right simple simplest easy easiest quick
quickest quickly possible really actually also and or but so if then than else thing things
something anything one's someone somebody kind sort-of help question example examples
go going get getting got make making via using use used through into onto to from up out
over under again further once all each every both few other such only own same
very s t just don should now ok okay hey hi hello thanks thank would've i'm i've it's what's
how's whats hows im ive dont cant wont isnt arent doesnt didnt anyone sb sth yeah write
whether exist exists existing between
""".split())

# Function words that carry meaning when one replaces a content word ("for loop"/"while loop").
STRUCTURAL = frozenset("""
for while all each every both only first last same other more most few over under up down
out before after without and or not no
""".split())

NEGATIONS = frozenset("""
not no never n't nothing none nobody nowhere neither nor without cannot cant can't dont don't
doesnt doesn't didnt didn't isnt isn't arent aren't wasnt wasn't werent weren't wont won't
wouldnt wouldn't shouldnt shouldn't couldnt couldn't havent haven't hasnt hasn't except
excluding avoid avoiding prevent preventing
""".split())

# Each group has two sides; a text using one side and the other using the other is a near-miss.
ANTONYMS: tuple[tuple[frozenset[str], frozenset[str]], ...] = tuple(
    (frozenset(a.split()), frozenset(b.split())) for a, b in (
        ("increase increasing raise grow expand enlarge",
         "decrease decreasing reduce lower shrink"),
        ("bigger larger greater higher more longer wider taller heavier",
         "smaller less fewer lower shorter narrower lighter"),
        ("biggest largest greatest highest most longest maximum max",
         "smallest least fewest lowest shortest minimum min"),
        ("faster quicker", "slower"), ("fastest quickest", "slowest"),
        ("fast quick", "slow"), ("big large huge", "small tiny little"),
        ("first earliest oldest head", "last latest newest end tail"),
        ("add insert append push", "remove delete drop pop"),
        ("encode encoding encoded", "decode decoding decoded"),
        ("encrypt encryption encrypted", "decrypt decryption decrypted"),
        ("compress compression zip", "decompress decompression unzip extract"),
        ("serialize serialization", "deserialize deserialization"),
        ("upload uploading", "download downloading"), ("import importing", "export exporting"),
        ("ascending asc", "descending desc"), ("before", "after"), ("above", "below"),
        ("enable enabled", "disable disabled"), ("open opening", "close closing"),
        ("lowercase lower-case", "uppercase upper-case"), ("left", "right"),
        ("true", "false"), ("on", "off"), ("login log-in signin", "logout log-out signout"),
        ("input", "output"), ("send", "receive"),
        ("client", "server"), ("local", "remote"), ("public", "private"),
        ("sync synchronous synchronously", "async asynchronous asynchronously"),
        ("positive", "negative"), ("even", "odd"), ("hot warm", "cold cool"),
        ("buy", "sell"), ("win", "lose"), ("pros advantages benefits", "cons disadvantages"),
        ("best", "worst"), ("better", "worse"), ("good", "bad"), ("safe", "dangerous unsafe"),
        ("north", "south"), ("east", "west"), ("up", "down"), ("inner", "outer"),
        ("horizontal horizontally", "vertical vertically"), ("row rows", "column columns"),
        ("success succeed", "fail failure"), ("include", "exclude"), ("allow", "block deny"),
        ("merge", "split"), ("mount", "unmount"), ("install", "uninstall"),
        ("lock", "unlock"), ("subscribe", "unsubscribe"), ("freeze", "unfreeze"),
        ("start", "stop"), ("join", "leave"), ("accept", "reject"), ("import", "export"),
        ("rich", "poor"), ("cheap cheaper cheapest", "expensive pricier"),
        ("early", "late"), ("morning", "evening"), ("summer", "winter"), ("day", "night"),
        ("men", "women"), ("male", "female"), ("boy boys", "girl girls"),
        ("husband", "wife"), ("father dad", "mother mom"), ("son", "daughter"),
        ("parent parents", "child children"), ("min", "max"), ("minimum", "maximum"),
        ("shallow", "deep"), ("mutable", "immutable"), ("static", "dynamic"),
        ("strong", "weak"), ("explicit", "implicit"), ("global", "local"),
        ("forward", "backward"), ("ahead", "behind"), ("inside", "outside"),
        ("old", "young new"), ("older elder", "younger newer"), ("oldest eldest", "youngest"),
        ("soft", "hard"), ("top", "bottom"), ("high", "low"), ("long", "short"),
        ("wide", "narrow"), ("thick", "thin"), ("full", "empty"), ("wet", "dry"),
        ("light", "dark heavy"), ("white", "black"), ("push", "pull"), ("get getter", "set setter"),
        ("past", "future"), ("previous prev", "next"), ("prefix", "suffix"), ("plus", "minus"),
        ("add addition", "subtract subtraction"), ("multiply multiplication", "divide division"),
        ("union", "intersection"), ("expand", "collapse"), ("attach", "detach"),
        ("connect connected", "disconnect disconnected"), ("online", "offline"),
        ("grant", "revoke"), ("show visible shown", "hide hidden invisible"),
        ("inbound incoming", "outbound outgoing"), ("upstream", "downstream"),
        ("frontend front-end", "backend back-end"), ("ancestor", "descendant"),
        ("superclass", "subclass"), ("borrow", "lend"), ("love", "hate"), ("like", "dislike"),
        ("agree", "disagree"), ("arrive arrival", "depart departure"), ("entry", "exit"),
        ("valid", "invalid"), ("correct", "incorrect wrong"), ("equal", "unequal"),
        ("blocking", "non-blocking"), ("sorted", "unsorted"), ("ordered", "unordered"),
        ("signed", "unsigned"), ("width", "height"), ("front", "back"),
        ("increment", "decrement"), ("sunrise", "sunset"), ("king", "queen"),
        ("brother", "sister"), ("uncle", "aunt"), ("singular", "plural"), ("profit", "loss"),
        ("credit", "debit"), ("income", "expense"), ("deposit", "withdraw"),
        ("request", "response"), ("marshal", "unmarshal"), ("pack", "unpack"),
        ("login", "logout"), ("play", "pause"), ("mute", "unmute"), ("approve", "deny"),
        ("pass", "fail"), ("secure", "insecure"), ("healthy healthiest", "unhealthy"),
        ("many", "few"), ("always", "never"), ("everything", "nothing"), ("all", "none"),
        ("overestimate", "underestimate"), ("overflow", "underflow"),
        ("internal", "external"), ("heat", "cool"), ("inhale", "exhale"), ("yes", "no"),
        ("rise", "fall"), ("win winner", "loser"), ("attack", "defend"), ("legal", "illegal"),
        ("rational", "irrational"), ("prime", "composite"), ("maximize", "minimize"),
        ("upper", "lower"), ("zoom-in", "zoom-out"), ("speed-up", "slow-down"),
    ))

# Multi-word phrases folded into one token before tokenizing.
PHRASES: dict[str, str] = {
    "symbolic link": "symlink", "log in": "login", "log into": "login", "sign in": "login",
    "log out": "logout", "sign out": "logout", "zoom in": "zoom-in", "zoom out": "zoom-out",
    "speed up": "speed-up", "slow down": "slow-down", "front end": "frontend",
    "back end": "backend", "non blocking": "non-blocking", "new line": "newline",
    "regular expression": "regex", "how far": "distance", "how many people live in":
    "population of", "sum up": "summary",
}

NEGATING_PREFIXES = ("un", "in", "im", "il", "ir", "dis", "non-", "non")

# Canonical forms so that simple paraphrases compare equal in the content check.
SYNONYMS: dict[str, str] = {
    **dict.fromkeys("remove erase delete drop eliminate discard".split(), "delete"),
    **dict.fromkeys("dictionary dict hashmap".split(), "dict"),
    **dict.fromkeys("folder directory dir".split(), "directory"),
    **dict.fromkeys("integer int".split(), "int"),
    **dict.fromkeys("string str".split(), "string"),
    **dict.fromkeys("array arrays".split(), "array"),
    **dict.fromkeys("function func fn".split(), "function"),
    **dict.fromkeys("variable var".split(), "variable"),
    **dict.fromkeys("error exception".split(), "error"),
    **dict.fromkeys("reverse invert flip".split(), "reverse"),
    **dict.fromkeys("concatenate concat join combine".split(), "concatenate"),
    **dict.fromkeys("change modify alter update".split(), "change"),
    **dict.fromkeys("create generate produce construct build define declare".split(), "create"),
    **dict.fromkeys("find locate search lookup".split(), "find"),
    **dict.fromkeys("check test verify determine tell see view".split(), "check"),
    **dict.fromkeys("convert transform turn cast translate".split(), "convert"),
    **dict.fromkeys("print display show".split(), "print"),
    **dict.fromkeys("run execute launch".split(), "run"),
    **dict.fromkeys("fix repair resolve solve".split(), "fix"),
    **dict.fromkeys("large big huge".split(), "big"),
    **dict.fromkeys("small tiny little".split(), "small"),
    **dict.fromkeys("quick fast rapid".split(), "fast"),
    **dict.fromkeys("capital capitol".split(), "capital"),
    **dict.fromkeys("begin start commence".split(), "start"),
    **dict.fromkeys("end finish complete".split(), "end"),
    **dict.fromkeys("car automobile vehicle".split(), "car"),
    **dict.fromkeys("doctor physician".split(), "doctor"),
    **dict.fromkeys("kid child".split(), "child"),
    **dict.fromkeys("purpose point goal aim".split(), "purpose"),
    **dict.fromkeys("difference differ different distinction".split(), "difference"),
    **dict.fromkeys("meaning mean means definition".split(), "meaning"),
    **dict.fromkeys("work works working".split(), "work"),
    **dict.fromkeys("author wrote writer written".split(), "author"),
    **dict.fromkeys("invent invented inventor".split(), "invent"),
    **dict.fromkeys("happen happens happened occur".split(), "happen"),
    **dict.fromkeys("cause causes reason why".split(), "cause"),
    **dict.fromkeys("instal install installation setup".split(), "install"),
    **dict.fromkeys("count number".split(), "count"),
    **dict.fromkeys("length len size".split(), "length"),
    **dict.fromkeys("item element entry".split(), "element"),
    **dict.fromkeys("duplicate duplicates dupe dupes".split(), "duplicate"),
    **dict.fromkeys("merge".split(), "merge"),
    **dict.fromkeys("append add".split(), "add"),
    **dict.fromkeys("summarize summarise summary overview".split(), "summary"),
    **dict.fromkeys("max maximum".split(), "max"),
    **dict.fromkeys("min minimum".split(), "min"),
    **dict.fromkeys("regex regexp regexes".split(), "regex"),
    **dict.fromkeys("calculate compute".split(), "calculate"),
    **dict.fromkeys("copy clone".split(), "copy"),
    **dict.fromkeys("upgrade update".split(), "change"),
    **dict.fromkeys("strip trim".split(), "delete"),
    **dict.fromkeys("picture photo image".split(), "image"),
    **dict.fromkeys("app application".split(), "app"),
    **dict.fromkeys("repo repository".split(), "repository"),
    **dict.fromkeys("docs documentation".split(), "documentation"),
    **dict.fromkeys("config configuration configure".split(), "configure"),
    **dict.fromkeys("iterate loop".split(), "loop"),
    **dict.fromkeys("js javascript".split(), "javascript"),
    **dict.fromkeys("ts typescript".split(), "typescript"),
    **dict.fromkeys("py python python3".split(), "python"),
    **dict.fromkeys("golang go-lang".split(), "go"),
    **dict.fromkeys("postgres postgresql psql".split(), "postgresql"),
    **dict.fromkeys("k8s kubernetes".split(), "kubernetes"),
    **dict.fromkeys("c++ cpp cplusplus".split(), "c++"),
    **dict.fromkeys("c# csharp".split(), "c#"),
    **dict.fromkeys("nodejs node.js node".split(), "node"),
    **dict.fromkeys("reactjs react.js react".split(), "react"),
    **dict.fromkeys("usa us america".split(), "usa"),
    **dict.fromkeys("uk britain".split(), "uk"),
}

# Lower-case words that name something (languages, formats, tools): compared like entities.
TECH = frozenset("""
python javascript typescript java kotlin scala rust go ruby php perl swift c c++ c# haskell
elixir erlang clojure lua r matlab julia dart bash zsh powershell sql mysql postgresql sqlite
mongodb redis kafka rabbitmq docker kubernetes git github gitlab linux windows macos ubuntu
debian android ios react vue angular svelte django flask fastapi rails spring express node
numpy pandas pytorch tensorflow keras json yaml xml csv toml html css markdown pdf excel png
jpg jpeg gif svg utf-8 ascii base64 http https tcp udp ssh ftp dns aws azure gcp nginx apache
jquery webpack npm pip conda maven gradle celsius fahrenheit kelvin
""".split())

UNITS = frozenset("""
mm cm m km inch inches foot feet ft yard yards mile miles meter meters metre metres kilometer
kilometers centimeter centimeters millimeter millimeters mg g kg gram grams kilogram kilograms
pound pounds lb lbs ounce ounces oz ton tons liter liters litre litres ml gallon gallons
second seconds sec secs ms millisecond milliseconds minute minutes min mins hour hours hr hrs
day days week weeks month months year years decade decades century centuries b kb mb gb tb
byte bytes kilobyte kilobytes megabyte megabytes gigabyte gigabytes bit bits percent %
dollar dollars usd euro euros eur yen pound-sterling celsius fahrenheit kelvin degree degrees
""".split())

NUMBER_WORDS: dict[str, str] = {w: str(i) for i, w in enumerate(
    "zero _one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty".split())}
NUMBER_WORDS.update({"thirty": "30", "forty": "40", "fifty": "50", "hundred": "100",
                     "thousand": "1000", "million": "1000000", "billion": "1000000000",
                     "dozen": "12", "half": "0.5", "twice": "2", "double": "2",
                     "triple": "3", "once": "1", "third": "3rd",
                     "fourth": "4th", "fifth": "5th", "tenth": "10th"})

DATES = frozenset("""
january february march april may june july august september october november december
jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday friday
saturday sunday yesterday tomorrow
""".split())

# Words after which the next content word is a target, or a source ("from").
TO_MARKERS = frozenset({"to", "into", "onto", "towards", "->", "=>", "→", "2", "with", "by"})

# Question-frame words dropped before aligning two questions word by word.
FILLER = frozenset("""
how what which who whom whose when where why do does did can could would should will shall
may might must i me my we our you your a an the is are was were be been being am please pls
there here way ways best good proper correct right simple simplest easy easiest quick quickest
quickly possible really actually just tell explain show give let lets know want need like help
some any someone somebody anyone question using use via it its this that these those of to
""".split())
FROM_MARKERS = frozenset({"from"})
THAN_MARKERS = frozenset({"than", "over", "instead", "vs", "versus", "before", "after"})
