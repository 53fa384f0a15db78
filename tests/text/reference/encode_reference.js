// tiktoken's side of the tokenizer's reference test (run.sh): OpenAI's tiktoken (npm `tiktoken`,
// its Rust core compiled to WebAssembly) with its `gpt2` encoding, printing what encode_corpus
// prints, line for line:
//   node encode_reference.js NODE_MODULES corpus CORPUS   ids per document of a corpus
//        (make_corpus.py's `<length>\n<bytes>` records), each document's bytes decoded as UTF-8
//        by Node first (WHATWG: invalid bytes become U+FFFD, as remat's to_valid_utf8 does)
//   node encode_reference.js NODE_MODULES codepoints      "U+XXXX: ids" of "\n  X's" for every
//        code point; a surrogate as the bytes of its 3-byte form, decoded as above
//   node encode_reference.js NODE_MODULES vocab           "id: hex bytes" for every token
// encode_ordinary throughout: no special tokens.
const fs = require('fs');
const path = require('path');
const { get_encoding } = require(path.join(process.argv[2], 'tiktoken'));
const enc = get_encoding('gpt2');
const mode = process.argv[3];
const out = [];
if (mode === 'corpus') {
  const buf = fs.readFileSync(process.argv[4]);
  let i = 0;
  while (i < buf.length) {
    const nl = buf.indexOf(10, i);
    const n = parseInt(buf.toString('ascii', i, nl), 10);
    const doc = buf.subarray(nl + 1, nl + 1 + n).toString('utf8');
    out.push(enc.encode_ordinary(doc).join(' '));
    i = nl + 1 + n;
  }
} else if (mode === 'codepoints') {
  for (let cp = 0; cp < 0x110000; ++cp) {
    const x = cp >= 0xd800 && cp <= 0xdfff
      ? Buffer.from([0xe0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3f), 0x80 | (cp & 0x3f)]).toString('utf8')
      : String.fromCodePoint(cp);
    out.push('U+' + cp.toString(16).toUpperCase().padStart(4, '0') + ': ' +
             enc.encode_ordinary('\n  ' + x + "'s").join(' '));
  }
} else if (mode === 'vocab') {
  for (let id = 0; id < 50257; ++id)
    out.push(id + ':' + Array.from(enc.decode_single_token_bytes(id), (b) => ' ' + b.toString(16).padStart(2, '0')).join(''));
} else {
  process.stderr.write(`encode_reference.js: unknown mode '${mode}' (expected corpus, codepoints or vocab)\n`);
  process.exit(2);
}
enc.free();
fs.writeSync(1, out.join('\n') + '\n');
