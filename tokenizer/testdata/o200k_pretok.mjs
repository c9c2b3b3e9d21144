// Writes o200k_pretok.json: the pieces gpt-tokenizer's o200k split regex (tiktoken's, run by
// node's own regex engine) cuts each input into. Run outside the repository:
//   npm install gpt-tokenizer@4.0.0 && node o200k_pretok.mjs > o200k_pretok.json
import { O200K_TOKEN_SPLIT_REGEX } from "gpt-tokenizer/encodingParams/constants";

const fixed = [
  "Hello world", "HelloWorld XMLHttpRequest iPhone McDonald", "don't I'M WE'LL they've She'd",
  "12345 3.14159 1,000,000", "path/to/file a//\n\nb x/\ny", "a   b\t\tc  \n  d", "trailing  ", "\r\n\r\nx",
  "naïve café", "cafe\u0301 e\u0301\u0301x", "Ελληνικά Греция ÀÉÎõü", "中文字符 日本語テキスト 한국어",
  "ǅemal ʰx Aʰb", "emoji 🎉🎉 ok👍", "مرحبا بالعالم", "<|channel|>analysis<|message|>",
  "func main() {\n\tfmt.Println(\"hi\")\n}\n", "  leading", "'s'S 'x", "ABCdef abcDEF", "A1b2C3",
  "  \n", "\u00a0x\u3000y", "x\u200by", "CAFÉ's", "ab'LL", "!!!\n\n\n?", " ?!/\n",
];
// Random strings over characters of every class the regex tells apart, seeded.
const alphabet = ["a", "z", "A", "Z", "é", "É", "ǅ", "ʰ", "中", "\u0301", "1", "٣", " ", "  ", "\t", "\n", "\r",
  "'", "s", "S", "ll", "/", "!", "_", "\u00a0", "🎉"];
let seed = 12345;
const rand = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
const random = [];
for (let i = 0; i < 300; i++) {
  let s = "";
  const len = 1 + rand(12);
  for (let j = 0; j < len; j++) s += alphabet[rand(alphabet.length)];
  random.push(s);
}
const vectors = [...fixed, ...random].map((text) => {
  const pieces = [...text.matchAll(O200K_TOKEN_SPLIT_REGEX)].map((m) => m[0]);
  if (pieces.join("") !== text) throw new Error("the matches do not cover " + JSON.stringify(text));
  return { text, pieces };
});
console.log(JSON.stringify({ source: "gpt-tokenizer 4.0.0, O200K_TOKEN_SPLIT_REGEX (tiktoken's o200k_base pattern) with node's RegExp",
  command: "npm install gpt-tokenizer@4.0.0 && node o200k_pretok.mjs > o200k_pretok.json", vectors }, null, 0));
