//! `toy train RECIPE --help`: the train command's help for one recipe, without
//! the flag groups that only the other recipes read.

use super::Cli;
use crate::config::Recipe;
use clap::{CommandFactory, ValueEnum};

/// The flag groups (help headings) that only some recipes read, with those recipes.
const RECIPE_GROUPS: [(&str, &[Recipe]); 3] = [
    ("Model shape (from scratch, warm-start)", &[Recipe::FromScratch, Recipe::WarmStart]),
    ("Warm-start", &[Recipe::WarmStart]),
    ("Finetune and LoRA", &[Recipe::Finetune]),
];

/// The recipe of `toy train RECIPE ... --help` in `args` (the arguments after
/// the program's name), if that is what they ask.
fn recipe_help(args: &[String]) -> Option<Recipe> {
    let help = args.iter().any(|a| a == "--help" || a == "-h");
    let train = args.iter().position(|a| a == "train")?;
    let recipe = args[train + 1..].iter().find(|a| !a.starts_with('-'))?;
    help.then(|| Recipe::from_str(recipe, true).ok()).flatten()
}

/// The command line's parser: [`Cli`]'s, except that for `toy train RECIPE
/// --help` the train command's help names the recipe first and hides the flag
/// groups that only other recipes read (`toy train --help` shows them all).
pub fn command_for(args: &[String]) -> clap::Command {
    let cmd = Cli::command();
    let Some(recipe) = recipe_help(args) else { return cmd };
    cmd.mut_subcommand("train", |train| {
        let about = recipe.to_possible_value().and_then(|v| v.get_help().map(|h| h.to_string())).unwrap_or_default();
        let hidden: Vec<_> = train
            .get_arguments()
            .filter(|a| {
                let heading = a.get_help_heading().unwrap_or_default();
                RECIPE_GROUPS.iter().any(|(h, recipes)| *h == heading && !recipes.contains(&recipe))
            })
            .map(|a| a.get_id().clone())
            .collect();
        let train = train.before_help(format!("Recipe {}: {about}", recipe.name()));
        hidden.into_iter().fold(train, |t, id| t.mut_arg(id, |a| a.hide(true)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn help(args: &[&str]) -> String {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let mut cmd = command_for(&args);
        cmd.build();
        let mut train = cmd.find_subcommand_mut("train").unwrap().clone();
        train.render_long_help().to_string()
    }

    /// Whether `help` lists the flag `--name` (its own line, not a mention).
    fn lists(help: &str, name: &str) -> bool {
        help.lines().any(|l| l.trim_start().starts_with(&format!("--{name} ")))
    }

    #[test]
    fn a_recipe_help_shows_that_recipe_s_flags_only() {
        let all = help(&["train", "--help"]);
        assert!(lists(&all, "lora-rank") && lists(&all, "donor") && lists(&all, "d-model"), "{all}");
        let finetune = help(&["train", "finetune", "--help"]);
        assert!(finetune.starts_with("Recipe finetune: An existing llama"), "{finetune}");
        assert!(lists(&finetune, "lora-rank") && !lists(&finetune, "donor") && !lists(&finetune, "d-model"), "{finetune}");
        let warm = help(&["--backend-dir", "x", "train", "warm-start", "-h"]);
        assert!(lists(&warm, "donor") && lists(&warm, "d-model") && !lists(&warm, "lora-rank"), "{warm}");
        let scratch = help(&["train", "from-scratch", "--help"]);
        assert!(lists(&scratch, "d-model") && !lists(&scratch, "donor") && !lists(&scratch, "lora-rank"), "{scratch}");
        // every recipe: the groups that every recipe reads
        for h in [&finetune, &warm, &scratch] {
            assert!(lists(h, "corpus") && lists(h, "steps") && lists(h, "lr") && lists(h, "device"), "{h}");
        }
        // not a help request, or not a recipe: the command as it is
        assert!(recipe_help(&["train".into(), "finetune".into()]).is_none());
        assert!(recipe_help(&["train".into(), "nope".into(), "--help".into()]).is_none());
    }
}
