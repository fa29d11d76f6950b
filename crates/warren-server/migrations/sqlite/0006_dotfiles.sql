-- A user's dotfiles repository, cloned into the home of their new workspaces at first start.
ALTER TABLE users ADD COLUMN dotfiles_url TEXT;
