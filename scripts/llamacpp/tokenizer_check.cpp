// Does llama.cpp tokenize a prepared corpus exactly as toy did?
//
// Loads the vocabulary of a toy checkpoint with llama.cpp, splits toy's ids
// (train.bin / val.bin of a prepared folder) into documents at the end-of-text
// id, detokenizes each with llama.cpp, checks the text is one of the source's
// documents (when given) and tokenizes it again: the ids must be toy's.
//
// usage: tokenizer_check CHECKPOINT.gguf IDS.bin [SOURCE.txt]
#include "llama.h"
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

static std::string trim(const std::string & s) {
    size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
    return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

int main(int argc, char ** argv) {
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
