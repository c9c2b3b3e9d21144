#!/usr/bin/env python3
"""Inter-token gaps of one streaming client while other clients send embedding batches.

usage: embed-itl.py URL SECONDS EMBED_CLIENTS INPUTS_PER_BATCH WORDS_PER_INPUT

Against `ubatch serve --embeddings` (or any server with /v1/completions and /v1/embeddings): one
client streams 200-token greedy completions (ignore_eos) back to back and records the gap
between consecutive SSE events of each; EMBED_CLIENTS clients meanwhile post /v1/embeddings
requests of INPUTS_PER_BATCH inputs of WORDS_PER_INPUT random words each, back to back. After
SECONDS it prints the gaps' percentiles and the embedding requests served, as one JSON line.
Standard library only. See docs/performance.md.
"""
import json, multiprocessing, sys, time, urllib.request, random

url, secs, nemb, ninp, words = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
vocab = ("the cat sat on a mat and looked at big red ball for long time while little girl named lily "
         "played in garden with her dog under tall tree near old house by river").split()
stop = time.time() + secs

def post(path, body, stream=False):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=600)

def embedder(seed, done, inputs, errs):
    rnd = random.Random(seed)
    while time.time() < stop:
        batch = [" ".join(rnd.choice(vocab) for _ in range(words)) for _ in range(ninp)]
        try:
            with post("/v1/embeddings", {"input": batch}) as r:
                d = json.load(r)
                with done.get_lock():
                    done.value += 1
                    inputs.value += len(d["data"])
        except Exception as e:
            with errs.get_lock():
                errs.value += 1
            print("embed error", e, file=sys.stderr)

gaps = []
def streamer():
    while time.time() < stop:
        body = {"prompt": "Once upon a time", "max_tokens": 200, "temperature": 0, "ignore_eos": True, "stream": True}
        with post("/v1/completions", body) as r:
            last = None
            for line in r:
                if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                    continue
                now = time.perf_counter()
                if last is not None:
                    gaps.append(now - last)
                last = now

# The embedding clients run in processes of their own: in threads they would hold the streamer's
# interpreter lock (up to its 5 ms switch interval) and add their JSON parsing to its gaps.
emb_done, emb_inputs, emb_err = multiprocessing.Value("i", 0), multiprocessing.Value("i", 0), multiprocessing.Value("i", 0)
ps = [multiprocessing.Process(target=embedder, args=(i, emb_done, emb_inputs, emb_err)) for i in range(nemb)]
for p in ps:
    p.start()
streamer()
for p in ps:
    p.join()
gaps.sort()
def pct(p):
    return gaps[min(len(gaps) - 1, int(p / 100 * len(gaps)))] * 1000
print(json.dumps({"gaps": len(gaps), "p50_ms": round(pct(50), 1), "p90_ms": round(pct(90), 1), "p99_ms": round(pct(99), 1),
                  "max_ms": round(gaps[-1] * 1000, 1), "embed_requests": emb_done.value, "embed_inputs": emb_inputs.value, "embed_errors": emb_err.value}))
