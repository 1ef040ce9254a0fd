// Does llama.cpp tokenize a prepared corpus exactly as toy did?
//
// Loads the vocabulary of a toy checkpoint with llama.cpp, splits toy's ids
// (train.bin / val.bin of a prepared folder) into documents at the end-of-text
// id, detokenizes each with llama.cpp, checks the text is one of the source's
// documents (when given) and tokenizes it again: the ids must be toy's.
//
// usage: tokenizer_check CHECKPOINT.gguf IDS.bin [SOURCE.txt]
//
// Second mode: does llama.cpp tokenize a text exactly as toy did?
//
// usage: tokenizer_check --text VOCAB.gguf TEXT.txt TOY_IDS.bin special|plain whole|lines
//   TOY_IDS.bin: `toy debug tokenize` of TEXT.txt (with --special for
//   `special`, --lines for `lines`: each line with its newline tokenized on its
//   own, -1 after each). llama.cpp tokenizes the same way (llama_tokenize
//   without BOS/EOS, parse_special as asked) and the ids must be equal.
#include "llama.h"
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

static std::string trim(const std::string & s) {
    size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
    return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

static std::vector<llama_token> tokenize(const llama_vocab * vocab, const std::string & text, bool special) {
    std::vector<llama_token> ids(text.size() + 16);
    int n = llama_tokenize(vocab, text.data(), (int32_t) text.size(), ids.data(), (int32_t) ids.size(), false, special);
    if (n < 0) { ids.resize(-n); n = llama_tokenize(vocab, text.data(), (int32_t) text.size(), ids.data(), (int32_t) ids.size(), false, special); }
    ids.resize(n < 0 ? 0 : n);
    return ids;
}

// The pieces of `ids` (toy's), cut at -1 when `lines`.
static std::vector<std::vector<llama_token>> pieces_of(const std::vector<llama_token> & ids, bool lines) {
    std::vector<std::vector<llama_token>> out(1);
    for (llama_token id : ids) {
        if (lines && id == -1) { out.emplace_back(); continue; }
        out.back().push_back(id);
    }
    if (lines) out.pop_back();
    return out;
}

static int text_mode(int argc, char ** argv) {
    if (argc != 7) { fprintf(stderr, "usage: %s --text VOCAB.gguf TEXT.txt TOY_IDS.bin special|plain whole|lines\n", argv[0]); return 2; }
    const bool special = std::string(argv[5]) == "special", lines = std::string(argv[6]) == "lines";
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model * model = llama_model_load_from_file(argv[2], mp);
    if (!model) { fprintf(stderr, "llama.cpp cannot load %s\n", argv[2]); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    std::ifstream tf(argv[3], std::ios::binary), inf(argv[4], std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(tf)), std::istreambuf_iterator<char>());
    std::vector<char> raw((std::istreambuf_iterator<char>(inf)), std::istreambuf_iterator<char>());
    std::vector<llama_token> toy_ids(raw.size() / 4);
    memcpy(toy_ids.data(), raw.data(), toy_ids.size() * 4);
    std::vector<std::string> texts;
    if (lines) {
        for (size_t pos = 0; pos < text.size();) {
            size_t nl = text.find('\n', pos);
            size_t end = nl == std::string::npos ? text.size() : nl + 1;
            texts.push_back(text.substr(pos, end - pos));
            pos = end;
        }
    } else {
        texts.push_back(text);
    }
    auto toy = pieces_of(toy_ids, lines);
    if (toy.size() != texts.size()) { printf("toy has %zu pieces, the text %zu\n", toy.size(), texts.size()); return 1; }
    size_t n_ids = 0, bad = 0;
    for (size_t i = 0; i < texts.size(); i++) {
        auto got = tokenize(vocab, texts[i], special);
        n_ids += got.size();
        if (got == toy[i]) continue;
        if (bad++ < 3) {
            size_t k = 0;
            while (k < got.size() && k < toy[i].size() && got[k] == toy[i][k]) k++;
            std::string ctx;
            for (size_t j = k; j < got.size() && j < k + 6; j++) ctx += "[" + std::string(llama_vocab_get_text(vocab, got[j])) + "]";
            std::string toy_ctx;
            for (size_t j = k; j < toy[i].size() && j < k + 6; j++) toy_ctx += "[" + std::string(llama_vocab_get_text(vocab, toy[i][j])) + "]";
            printf("piece %zu differs at id %zu: llama.cpp %s, toy %s\n", i, k, ctx.c_str(), toy_ctx.c_str());
        }
    }
    printf("%s, %s, %s: %zu bytes, %zu pieces, %zu llama.cpp ids: %zu pieces tokenized differently\n", argv[2],
           special ? "special tokens parsed" : "special tokens as text", lines ? "line by line" : "whole text", text.size(), texts.size(), n_ids, bad);
    llama_model_free(model);
    return bad ? 1 : 0;
}

int main(int argc, char ** argv) {
    if (argc > 1 && std::string(argv[1]) == "--text") return text_mode(argc, argv);
    if (argc < 3) { fprintf(stderr, "usage: %s CHECKPOINT.gguf IDS.bin [SOURCE.txt]\n", argv[0]); return 2; }
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "llama.cpp cannot load %s\n", argv[1]); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const llama_token eot = llama_vocab_eos(vocab);
    printf("vocab: %d tokens, type %d (2 = BPE), bos %d, eos %d, eot %d\n", llama_vocab_n_tokens(vocab), (int) llama_vocab_type(vocab), llama_vocab_bos(vocab), eot, llama_vocab_eot(vocab));

    std::ifstream in(argv[2], std::ios::binary);
    std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<llama_token> ids(raw.size() / 4);
    for (size_t i = 0; i < ids.size(); i++) ids[i] = (llama_token) ((uint8_t) raw[4 * i] | (uint8_t) raw[4 * i + 1] << 8 | (uint8_t) raw[4 * i + 2] << 16 | (uint32_t) (uint8_t) raw[4 * i + 3] << 24);

    std::set<std::string> source;
    if (argc > 3) {
        std::ifstream s(argv[3]);
        std::string text((std::istreambuf_iterator<char>(s)), std::istreambuf_iterator<char>()), line, doc;
        size_t pos = 0;
        while (pos <= text.size()) {
            size_t nl = text.find('\n', pos);
            line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos + 1);
            if (trim(line) == "<|endoftext|>") { source.insert(trim(doc)); doc.clear(); } else { doc += line; }
            if (nl == std::string::npos) break;
            pos = nl + 1;
        }
        source.insert(trim(doc));
    }

    int docs = 0, bad_ids = 0, bad_text = 0;
    size_t start = 0;
    for (size_t i = 0; i < ids.size(); i++) {
        if (ids[i] != eot) continue;
        std::vector<llama_token> want(ids.begin() + start, ids.begin() + i);
        start = i + 1;
        std::vector<char> buf(want.size() * 64 + 64);
        int n = llama_detokenize(vocab, want.data(), (int32_t) want.size(), buf.data(), (int32_t) buf.size(), false, true);
        std::string text(buf.data(), n < 0 ? 0 : n);
        if (!source.empty() && !source.count(text)) { if (bad_text++ < 3) printf("text of document %d is not in the source: %.60s\n", docs, text.c_str()); }
        std::vector<llama_token> got(text.size() + 16);
        int k = llama_tokenize(vocab, text.data(), (int32_t) text.size(), got.data(), (int32_t) got.size(), false, true);
        got.resize(k < 0 ? 0 : k);
        if (got != want) { if (bad_ids++ < 3) printf("document %d: llama.cpp gives %zu ids, toy %zu: %.60s\n", docs, got.size(), want.size(), text.c_str()); }
        docs++;
    }
    printf("%d documents, %zu ids: %d tokenized differently, %d texts not in the source\n", docs, ids.size(), bad_ids, bad_text);
    llama_model_free(model);
    return (docs == 0 || bad_ids || bad_text) ? 1 : 0;
}
