// The token index of a batch, for the embeddings' backward (layers/embedding.cuh): the
// positions of each distinct token, grouped, and cut into chunks of at most kChunk positions.
//   unique[i]                        the i-th distinct token id, ascending
//   positions[offsets[i]..offsets[i+1])  the positions t with tokens[t] = unique[i], ascending
//   chunk j                          positions[chunk_start[j]..chunk_start[j+1]) of token
//                                    unique[chunk_token[j]]; chunk_slot[j] = -1 when it is its
//                                    token's only chunk, else its partial-sum slot
//   multi_token[m], multi_slot[m..m+1)  tokens of several chunks and their slots
// Built on the host by a counting sort over ids [0, V): O(T + V). Tokens: T ids in [0, V).
#pragma once
#include <cstddef>
#include <vector>

namespace layers {

struct TokenIndex {
  static constexpr int kChunk = 64;
  std::vector<int> unique, offsets, positions;  // CSR: positions[offsets[i] .. offsets[i+1]) hold token unique[i]
  std::vector<int> chunk_start;                 // chunk j: positions[chunk_start[j] .. chunk_start[j+1])
  std::vector<int> chunk_token;                 // chunk j belongs to unique[chunk_token[j]]
  std::vector<int> chunk_slot;                  // -1 (its token's only chunk) or its partial-sum slot
  std::vector<int> multi_token;                 // tokens of several chunks (index into unique) ...
  std::vector<int> multi_slot;                  // ... and their slots [multi_slot[m], multi_slot[m+1])
  TokenIndex() = default;
  TokenIndex(const int* tokens, int T, int V) {
    std::vector<int> count(V + 1, 0);
    for (int t = 0; t < T; t++) count[tokens[t] + 1]++;
    for (int v = 0; v < V; v++) count[v + 1] += count[v];
    positions.resize(T);
    std::vector<int> fill(count.begin(), count.end() - 1);
    for (int t = 0; t < T; t++) positions[fill[tokens[t]]++] = t;
    for (int v = 0; v < V; v++)
      if (count[v + 1] > count[v]) {
        unique.push_back(v);
        offsets.push_back(count[v]);
      }
    offsets.push_back(T);
    int slots = 0;
    multi_slot.push_back(0);
    for (int i = 0; i < (int)unique.size(); i++) {
      const int b = offsets[i], e = offsets[i + 1], n = (e - b + kChunk - 1) / kChunk;
      for (int k = 0; k < n; k++) {
        chunk_start.push_back(b + k * kChunk);
        chunk_token.push_back(i);
        chunk_slot.push_back(n == 1 ? -1 : slots++);
      }
      if (n > 1) {
        multi_token.push_back(i);
        multi_slot.push_back(slots);
      }
    }
    chunk_start.push_back(T);
  }
  int slots() const { return multi_slot.back(); }
  // Every array in one buffer (one upload): the layout view() expects.
  std::vector<int> packed() const {
    std::vector<int> p;
    for (const std::vector<int>* a : {&unique, &positions, &chunk_start, &chunk_token, &chunk_slot, &multi_token, &multi_slot})
      p.insert(p.end(), a->begin(), a->end());
    return p;
  }
  // Upper bounds for buffers sized once for T tokens: packed() ints, slots() and chunks.
  static size_t max_packed(int T) { return 7 * (size_t)T + 2; }
  static size_t max_slots(int T) { return 2 * (size_t)T / kChunk + 1; }
  static size_t max_chunks(int T) { return (size_t)T; }  // every chunk holds a position
};

}  // namespace layers
