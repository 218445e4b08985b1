// The shipped recipes (recipes/*.toml), their text built into the binary by the Makefile
// (build/recipes.cpp), so that --preset NAME finds them from any working directory.
#pragma once

namespace train {

struct ShippedRecipe {
  const char* name;  // the file's name without .toml: "tiny"
  const char* text;  // its contents
};
extern const ShippedRecipe kShippedRecipes[];
extern const int kShippedRecipeCount;

}  // namespace train
