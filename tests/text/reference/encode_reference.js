// Encodes each document of a corpus (make_corpus.py's `<length>\n<bytes>` records) with the npm
// package gpt-3-encoder, the reference GPT-2 encoder (its README: a port of OpenAI's
// encoder.py), and prints one line of space-separated ids per document. Each document's bytes
// are decoded as UTF-8 by Node first (invalid bytes become U+FFFD).
//   node encode_reference.js NODE_MODULES_DIR CORPUS > ids.txt
const fs = require('fs');
const path = require('path');
const { encode } = require(path.join(process.argv[2], 'gpt-3-encoder'));
const buf = fs.readFileSync(process.argv[3]);
const lines = [];
let i = 0;
while (i < buf.length) {
  const nl = buf.indexOf(10, i);
  const n = parseInt(buf.toString('ascii', i, nl), 10);
  const doc = buf.subarray(nl + 1, nl + 1 + n).toString('utf8');
  lines.push(encode(doc).join(' '));
  i = nl + 1 + n;
}
fs.writeSync(1, lines.join('\n') + '\n');
